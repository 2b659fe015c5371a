"""``accelerate.utils.other``: ``extract_model_from_parallel`` (``transformers.unwrap_model`` calls it)."""

from __future__ import annotations

from typing import Any

from torch import nn


def _inner(model: nn.Module) -> nn.Module | None:
    if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        return model.module
    try:
        from deepspeed import DeepSpeedEngine
    except ImportError:
        DeepSpeedEngine = None  # noqa: N806
    if DeepSpeedEngine is not None and isinstance(model, DeepSpeedEngine):
        return model.module
    return None


def extract_model_from_parallel(
    model: nn.Module,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> nn.Module:
    """The user's module from under DDP / DataParallel / DeepSpeed and (unless kept) torch.compile wrappers.

    ``keep_fp32_wrapper=False`` also removes overdrive's autocast forward; ``recursive`` also
    unwraps DDP-wrapped submodules.
    """
    wrapper = model if isinstance(getattr(model, "_orig_mod", None), nn.Module) else None
    if wrapper is not None:
        model = wrapper._orig_mod  # type: ignore[assignment]
    while (inner := _inner(model)) is not None:
        model = inner
    if not keep_fp32_wrapper:
        _drop_fp32_forward(model)
    if recursive:
        for name, child in list(model.named_children()):
            unwrapped = extract_model_from_parallel(
                child, keep_fp32_wrapper, keep_torch_compile, recursive=True
            )
            if unwrapped is not child:
                setattr(model, name, unwrapped)
    if keep_torch_compile and wrapper is not None:
        wrapper._orig_mod = model  # the compiled wrapper, now around the unwrapped module
        return wrapper
    return model


def _drop_fp32_forward(model: nn.Module) -> None:
    """Take off overdrive's autocast forward, or a ``convert_outputs_to_fp32`` wrapper whose
    original forward the model kept in ``_original_forward``."""
    from overdrive.precision.autocast import AutocastForward

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
