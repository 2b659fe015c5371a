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
    compiled = getattr(model, "_orig_mod", None)
    if isinstance(compiled, nn.Module):
        model = compiled
    while (inner := _inner(model)) is not None:
        model = inner
    if keep_torch_compile and isinstance(compiled, nn.Module):
        pass  # the compiled wrapper is returned around the unwrapped module only when nothing else wrapped it
    if not keep_fp32_wrapper:
        from overdrive.precision.autocast import AutocastForward

        forward: Any = model.__dict__.get("forward")
        if isinstance(forward, AutocastForward):
            del model.forward
    if recursive:
        for name, child in list(model.named_children()):
            unwrapped = extract_model_from_parallel(
                child, keep_fp32_wrapper, keep_torch_compile, recursive=True
            )
            if unwrapped is not child:
                setattr(model, name, unwrapped)
    return model
