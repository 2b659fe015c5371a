"""Hooks run before ``save_state`` / ``load_state`` (``register_*_state_pre_hook``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from torch.utils.hooks import RemovableHandle

from overdrive.errors import OverdriveError

SaveHook = Callable[[list[Any], list[dict[str, Any]], str], None]
LoadHook = Callable[[list[Any], str], None]


class HooksMixin:
    """Save hooks get ``(models, weights, output_dir)``, load hooks ``(models, input_dir)``.

    A hook may write extra files or change the models; overdrive saves and loads every
    prepared model, so a hook that removes one from the lists it was given is refused.
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

    def _run_save_state_hooks(self, output_dir: Any) -> None:
        hooks = self._hooks("_save_hooks")
        if not hooks:
            return
        models = list(self._models)  # type: ignore[attr-defined]
        weights = [self.get_state_dict(m) for m in models]  # type: ignore[attr-defined]
        for hook in list(hooks.values()):
            hook(models, weights, str(output_dir))
        _check_kept("save", len(self._models), len(models), len(weights))  # type: ignore[attr-defined]

    def _run_load_state_hooks(self, input_dir: Any) -> None:
        hooks = self._hooks("_load_hooks")
        if not hooks:
            return
        models = list(self._models)  # type: ignore[attr-defined]
        for hook in list(hooks.values()):
            hook(models, str(input_dir))
        _check_kept("load", len(self._models), len(models))  # type: ignore[attr-defined]


def _register(hooks: OrderedDict[int, Any], hook: Callable[..., Any]) -> RemovableHandle:
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def _check_kept(what: str, prepared: int, *lengths: int) -> None:
    if any(n != prepared for n in lengths):
        raise OverdriveError(
            f"a {what}_state pre-hook removed models from the list it was given; overdrive "
            f"{what}s every prepared model with the checkpoint\n"
            f"  fix: leave the lists as they are; write extra files from the hook, or prepare "
            "only the models the checkpoint should hold"
        )
