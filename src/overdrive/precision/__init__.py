"""Precision policies: fp32, bf16, fp16 with loss scaling, fp8."""

from overdrive.precision.base import Precision

__all__ = ["Precision"]
