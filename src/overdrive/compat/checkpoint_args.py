"""Hugging Face Accelerate's optional arguments to ``save_state`` / ``load_state`` /
``unwrap_model``, checked; ``save`` and ``unscale_gradients``.

An argument overdrive does not know is an error listing the valid ones (never swallowed);
one of Hugging Face Accelerate's arguments that has nothing to do here is accepted when its
value asks for what overdrive does anyway, and refused (with the reason) otherwise.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from overdrive.bigmodel.write_once import write_once
from overdrive.compile.model import compiled_like
from overdrive.errors import ConfigError

SAVE_STATE_ARGS = ("output_dir", "timeout", "safe_serialization", "async_save")
LOAD_STATE_ARGS = ("input_dir", "timeout", "allow_unsafe_pickle", "load_kwargs", "strict")
UNWRAP_ARGS = ("model", "keep_fp32_wrapper", "keep_torch_compile")


def _unknown(method: str, given: dict[str, Any], valid: tuple[str, ...]) -> None:
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise TypeError(
            f"{method}() got unknown keyword argument(s) {unknown}; valid: {list(valid)}"
        )


def save_state_kwargs(kwargs: dict[str, Any], accelerate_layout: bool = False) -> dict[str, Any]:
    """The arguments checkpoint.save_state takes, after checking Hugging Face Accelerate's.
    ``accelerate_layout`` (checkpoint_format: accelerate): ``safe_serialization`` chooses the
    model file there, as in Accelerate."""
    _unknown("save_state", kwargs, SAVE_STATE_ARGS)
    out = dict(kwargs)
    if accelerate_layout:
        return out
    if out.pop("safe_serialization", True) is False:
        warnings.warn(
            "save_state(safe_serialization=False): overdrive always writes tensors as "
            "safetensors and small state as JSON (never pickle); the checkpoint is safe",
            UserWarning,
            stacklevel=3,
        )
    return out


def load_state_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments checkpoint.load_state takes, after checking Hugging Face Accelerate's."""
    _unknown("load_state", kwargs, LOAD_STATE_ARGS)
    out = dict(kwargs)
    if out.pop("strict", True) is not True:
        raise ConfigError(
            "load_state(strict=False): overdrive restores every part strictly (a missing or "
            "unexpected key is an error, not ignored)",
            key="strict",
            fix="drop strict=False; load partial weights yourself with "
            "model.load_state_dict(..., strict=False) after load_state",
        )
    if out.pop("load_kwargs", None):
        raise ConfigError(
            "load_state(load_kwargs=...) passes arguments to torch.load, which overdrive uses "
            "only for old pickle checkpoints",
            key="load_kwargs",
            fix="drop load_kwargs (pass allow_unsafe_pickle=True to read a trusted old "
            "pickle checkpoint)",
        )
    return out


class CheckpointArgsMixin:
    """``save``, ``unscale_gradients`` and the argument checks above."""

    state: Any
    project_configuration: Any
    gradient_state: Any
    _optimizers: list[Any]

    def save(self, obj: Any, f: str | os.PathLike[str], safe_serialization: bool = False) -> None:
        """Write ``obj`` to ``f`` once (main process; each machine's with
        ``save_on_each_node``): a dict of tensors as safetensors when ``safe_serialization``,
        else with ``torch.save``. The file appears whole or not at all."""
        on_each_node = bool(getattr(self.project_configuration, "save_on_each_node", False))
        writer = self.state.is_local_main_process if on_each_node else self.state.is_main_process
        if not writer:
            return

        write_once(obj, f, safe_serialization)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale fp16 gradients now (e.g. before inspecting them); done once per step."""
        chosen = self._optimizers if optimizer is None else _as_list(optimizer)
        if not self.gradient_state.sync_gradients:
            return
        for opt in chosen:
            prepared = next((o for o in self._optimizers if o is opt or o.optimizer is opt), None)
            if prepared is None:
                raise ConfigError(
                    "unscale_gradients() got an optimizer that was not prepared",
                    key="optimizer",
                    fix="pass the optimizer returned by accelerator.prepare",
                )
            prepared.prepare_grads()

    def _keep_compiled(self, model: Any, module: Any, keep_torch_compile: bool | None) -> Any:
        """``module`` (unwrapped from ``model``), compiled again with ``model``'s compile
        settings when ``keep_torch_compile=True`` asks for it. The wrapper is a new one:
        re-pointing the prepared compiled model at the unwrapped module, as Hugging Face
        Accelerate does, would make it bypass DDP afterwards."""
        if not keep_torch_compile or not hasattr(model, "_orig_mod"):
            return module

        again = compiled_like(model, module)
        if again is None:  # regional compilation: the compiled blocks are inside ``module``
            warnings.warn(
                "unwrap_model(keep_torch_compile=True) of a regionally compiled model returns "
                "your module, whose compiled blocks stay compiled",
                UserWarning,
                stacklevel=3,
            )
            return module
        return again


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]
