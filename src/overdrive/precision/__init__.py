"""Precision policies: fp32, bf16, fp16 with loss scaling, fp8."""

from __future__ import annotations

from typing import Any

import torch

from overdrive.precision.base import Precision

__all__ = ["Precision", "make_precision"]


def make_precision(
    mixed_precision: str,
    device: torch.device,
    *,
    autocast_kwargs: Any = None,
    scaler_kwargs: Any = None,
    fp8_recipe: Any = None,
    distributed_type: Any = None,
) -> Precision:
    """The precision policy for a setting value (placeholder until the precision work lands)."""
    if mixed_precision == "no":
        return Precision()
    raise NotImplementedError(f"mixed_precision={mixed_precision!r} is not built yet")
