"""The user's module from under the wrappers a run puts around it (DDP, DataParallel,
DeepSpeed's engine, FSDP, torch.compile, overdrive's fp32 forward), with Hugging Face
Accelerate's ``extract_model_from_parallel`` semantics (the face ``overdrive/utils/other.py``
re-exports it; ``transformers.unwrap_model`` calls it). A strategy's own ``unwrap`` answers
for the model it prepared; this one takes any model."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from overdrive.compile.regions import is_compiled_module
from overdrive.precision.autocast import AutocastForward


def _wrappers() -> tuple[type, ...]:
    """The distributed containers that hold the user's module as ``.module``."""
    kinds: list[type] = [nn.parallel.DistributedDataParallel, nn.DataParallel]
    try:
        from deepspeed import DeepSpeedEngine

        kinds.append(DeepSpeedEngine)
    except ImportError:
        pass
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FullyShardedDataParallel

        kinds.append(FullyShardedDataParallel)
    return tuple(kinds)


def extract_model_from_parallel(
    model: nn.Module,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> nn.Module:
    """The user's module from under DDP / DataParallel / DeepSpeed / FSDP and (unless kept)
    torch.compile wrappers, whole-model or regional.

    ``keep_fp32_wrapper=False`` also removes overdrive's autocast forward; ``recursive`` also
    unwraps wrapped submodules.
    """
    compiled = None
    if is_compiled_module(model) or "_orig_mod" in model.__dict__:
        compiled = model
        inner = model._orig_mod if is_compiled_module(model) else model.__dict__["_orig_mod"]
        assert isinstance(inner, nn.Module)
        model = inner
    wrappers = _wrappers()
    while isinstance(model, wrappers):
        model = model.module  # type: ignore[assignment]
    if not keep_fp32_wrapper:
        _drop_fp32_forward(model)
    if recursive:
        for name, child in list(model.named_children()):
            unwrapped = extract_model_from_parallel(
                child, keep_fp32_wrapper, keep_torch_compile, recursive=True
            )
            if unwrapped is not child:
                setattr(model, name, unwrapped)
    if keep_torch_compile and compiled is not None:
        if is_compiled_module(compiled):
            compiled._orig_mod = model  # the compiled wrapper, now around the unwrapped module
        else:  # regional compilation keeps the original outside its submodules
            compiled.__dict__["_orig_mod"] = model
        return compiled
    return model


def _drop_fp32_forward(model: nn.Module) -> None:
    """Take off overdrive's autocast forward, or a ``convert_outputs_to_fp32`` wrapper whose
    original forward the model kept in ``_original_forward``."""
    forward: Any = model.__dict__.get("forward")
    if isinstance(forward, AutocastForward):
        del model.forward
        return
    original = model.__dict__.pop("_original_forward", None)
    if original is None or forward is None:
        return
    # `==`: two reads of a bound method are equal but not the same object
    while forward != original and hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    if forward == original:
        model.forward = original


def get_model_tp_size(model: nn.Module) -> int | None:
    """The tensor-parallel degree a transformers model was sharded with, or None.

    transformers before 5 keeps it on the model (``model.tp_size``); from 5 on it sits in the
    config's ``distributed_config`` and ``model.tp_size`` stays as a None stub.
    """
    size = getattr(model, "tp_size", None)
    if size is not None:
        return int(size)
    config = getattr(getattr(model, "config", None), "distributed_config", None)
    found = config.get("tp_size") if isinstance(config, dict) else getattr(config, "tp_size", None)
    return None if found is None else int(found)


def model_has_dtensor(model: nn.Module) -> bool:
    """Whether any of ``model``'s parameters is a ``DTensor`` (sharded by FSDP2 or TP)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())
