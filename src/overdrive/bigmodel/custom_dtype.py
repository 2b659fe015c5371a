"""Element types torch has no dtype for, which size calculations still need (torch-free)."""

from __future__ import annotations

import enum


class CustomDtype(enum.Enum):
    """Quantized element types: 8-bit float, 4-bit and 2-bit integers."""

    FP8 = "fp8"
    INT4 = "int4"
    INT2 = "int2"
