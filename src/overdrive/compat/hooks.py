"""Hooks run before ``save_state`` / ``load_state`` (``register_*_state_pre_hook``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from torch.utils.hooks import RemovableHandle

SaveHook = Callable[[list[Any], list[dict[str, Any]], str], None]
LoadHook = Callable[[list[Any], str], None]


class HooksMixin:
    """Save hooks get ``(models, weights, output_dir)``, load hooks ``(models, input_dir)``.

    A hook may write extra files, change the models, and pop from the lists the models it
    saved or loaded itself (Hugging Face Accelerate then leaves those to the hook; diffusers'
    scripts do this). overdrive still writes and restores every prepared model with the
    checkpoint: the hook's own copy is an extra one, restored first and then overwritten with
    the same values, so a resumed run never depends on a hook having kept a list intact.
    """

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Run ``hook(models, weights, output_dir)`` at the start of every ``save_state``."""
        return _register(self._hooks("_save_hooks"), hook)

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Run ``hook(models, input_dir)`` at the start of every ``load_state``."""
        return _register(self._hooks("_load_hooks"), hook)

    def _hooks(self, name: str) -> OrderedDict[int, Any]:
        hooks = self.__dict__.get(name)
        if hooks is None:
            hooks = OrderedDict()
            setattr(self, name, hooks)
        return hooks

    def _hook_models(self) -> list[Any]:
        """The models as Hugging Face Accelerate hands them to hooks: under DDP the module
        inside the wrapper (it keeps the model from before wrapping), otherwise as prepared.
        diffusers' hooks call the model's own methods on them (``save_pretrained``,
        ``register_to_config``), which a ``DistributedDataParallel`` does not have."""
        from torch.nn.parallel import DistributedDataParallel

        models = self._models  # type: ignore[attr-defined]
        return [m.module if isinstance(m, DistributedDataParallel) else m for m in models]

    def _run_save_state_hooks(self, output_dir: Any) -> None:
        hooks = self._hooks("_save_hooks")
        if not hooks:
            return
        prepared = list(self._models)  # type: ignore[attr-defined]
        weights = [self.get_state_dict(m) for m in prepared]  # type: ignore[attr-defined]
        models = self._hook_models()
        for hook in list(hooks.values()):
            hook(models, weights, str(output_dir))

    def _run_load_state_hooks(self, input_dir: Any) -> None:
        hooks = self._hooks("_load_hooks")
        if not hooks:
            return
        models = self._hook_models()
        for hook in list(hooks.values()):
            hook(models, str(input_dir))


def _register(hooks: OrderedDict[int, Any], hook: Callable[..., Any]) -> RemovableHandle:
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle
