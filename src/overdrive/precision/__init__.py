"""Precision policies: fp32, bf16, fp16 with loss scaling, fp8."""

from __future__ import annotations

import warnings

import torch

from overdrive.arguments.kwargs_handlers import AutocastKwargs, GradScalerKwargs
from overdrive.errors import ConfigError
from overdrive.precision.autocast import AutocastPrecision
from overdrive.precision.base import DelegatedPrecision, Precision
from overdrive.precision.fp8 import FP8Precision, FP8RecipeKwargs, check_fp8_available
from overdrive.precision.scaler import ScaledPrecision

__all__ = [
    "AutocastPrecision",
    "DelegatedPrecision",
    "FP8Precision",
    "FP8RecipeKwargs",
    "Precision",
    "ScaledPrecision",
    "make_precision",
]

_WARNED: set[tuple[str, str]] = set()
"""(handler, mode) pairs already warned about in this process: each warning shows once."""


def _warn_unused(handler: str, mode: str, source: str, why: str) -> None:
    """Warn once that ``handler`` has no effect under ``mode`` (not an error: one script may
    carry it and take its precision from the launch)."""
    if (handler, mode) in _WARNED:
        return
    _WARNED.add((handler, mode))
    warnings.warn(
        f"{handler} has no effect with mixed_precision={mode!r} (from {source}): {why}",
        UserWarning,
        stacklevel=5,  # the Accelerator(...) call in the user's script
    )


def _check_handlers(
    mode: str,
    owner: str | None,
    scaler_kwargs: GradScalerKwargs | None,
    fp8_recipe: FP8RecipeKwargs | None,
    source: str,
) -> None:
    if scaler_kwargs is not None and (mode != "fp16" or owner is not None):
        why = (
            f"{owner} runs its own loss scaling; configure it in the {owner} config"
            if owner is not None and mode == "fp16"
            else "only fp16 scales the loss (bf16 and fp32 need no loss scaling)"
        )
        _warn_unused("GradScalerKwargs", mode, source, why)
    if fp8_recipe is not None and mode != "fp8":
        _warn_unused("FP8RecipeKwargs", mode, source, "only fp8 converts linear layers")


def _warn_fp16_on_cpu(source: str) -> None:
    if ("fp16_on_cpu", "fp16") in _WARNED:
        return
    _WARNED.add(("fp16_on_cpu", "fp16"))
    warnings.warn(
        f"mixed_precision='fp16' (from {source}) on a CPU trains in fp32, as Hugging Face "
        "Accelerate does there. To rehearse fp16 (autocast and loss scaling) on CPU "
        "processes, set fp16_on_cpu (OVERDRIVE_FP16_ON_CPU=1 or --fp16_on_cpu); to train "
        "in a lower precision on this CPU, use bf16.",
        UserWarning,
        stacklevel=4,
    )


def _check_bf16(device: torch.device, source: str) -> None:
    if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError(
            f"mixed_precision='bf16' (from {source}) needs a GPU with native bfloat16 "
            f"(compute capability 8.0+, e.g. A100); {torch.cuda.get_device_name(device)} has none",
            key="mixed_precision",
            fix="use mixed_precision 'fp16' on this GPU",
        )


def make_precision(
    mixed_precision: str,
    device: torch.device,
    *,
    autocast_kwargs: AutocastKwargs | None = None,
    scaler_kwargs: GradScalerKwargs | None = None,
    fp8_recipe: FP8RecipeKwargs | None = None,
    precision_owner: str | None = None,
    source: str = "code",
    sharded_grads: bool = False,
    fp16_on_cpu: bool = False,
) -> Precision:
    """The precision policy for the ``mixed_precision`` setting on ``device``.

    ``source`` (e.g. ``str(settings.source("mixed_precision"))``) is named in errors.
    ``scaler_kwargs`` apply to fp16 only and ``fp8_recipe`` to fp8 only, so one script can
    carry both and take its precision from the launch; a handler the mode ignores gets a
    one-time warning saying so. ``precision_owner``: the engine that runs mixed precision
    itself (the strategy's ``precision_owner``; fp8 with one is refused when the settings
    resolve). ``sharded_grads``: gradients are DTensors spread over processes (FSDP, tensor
    parallelism), so fp16's inf check is agreed over all of them. ``fp16_on_cpu``: fp16 on
    a CPU autocasts and scales as on a GPU; without it a CPU trains in fp32, as Hugging Face
    Accelerate's does, with a warning.
    """
    if mixed_precision not in ("no", "bf16", "fp16", "fp8"):
        raise ConfigError(
            f"mixed_precision={mixed_precision!r} (from {source}) is not a precision",
            key="mixed_precision",
            fix="use one of no, fp16, bf16, fp8",
        )
    _check_handlers(mixed_precision, precision_owner, scaler_kwargs, fp8_recipe, source)
    if mixed_precision == "no":
        return Precision()
    if precision_owner is not None:
        return DelegatedPrecision(mixed_precision)
    if mixed_precision == "bf16":
        _check_bf16(device, source)
        return AutocastPrecision("bf16", device, torch.bfloat16, autocast_kwargs)
    if mixed_precision == "fp16" and device.type == "cpu" and not fp16_on_cpu:
        _warn_fp16_on_cpu(source)
        return Precision()
    if mixed_precision == "fp16":
        return ScaledPrecision(
            device,
            autocast_kwargs=autocast_kwargs,
            scaler_kwargs=scaler_kwargs,
            sharded=sharded_grads,
        )
    check_fp8_available(device, source)
    return FP8Precision(device, fp8_recipe, autocast_kwargs)
