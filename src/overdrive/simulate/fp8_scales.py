"""torchao's float8 scale from an amax, in three operators on a simulated rank.

``amax_to_scale`` computes ``finfo(dtype).max / clamp(amax.to(float64), min=eps)`` back in
float32: five operators on a one-element tensor, a DTensor under tensor parallelism, for
every float8 cast of every linear, forward, backward and recompute. On fake tensors their
values are made up anyway; what the rank holds and sends depends only on the scale's dtype,
shape and placement. Here: torchao's float64 copy and clamp (where a DTensor amax is
all-reduced, in float64, as in a real run), then the copy to float32. A fifth of a float8
step's time went to the five."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from overdrive.simulate.patching import patched


@contextlib.contextmanager
def float8_scales_in_three_operators() -> Iterator[None]:
    """Inside: torchao's ``amax_to_scale`` is three operators (torchao imported here)."""
    from torchao.float8 import float8_utils

    original = float8_utils.amax_to_scale

    def amax_to_scale(
        amax: torch.Tensor, float8_dtype: torch.dtype, round_scales_to_power_of_2: bool = False
    ) -> Any:
        if float8_dtype not in float8_utils.FP8_TYPES:
            return original(amax, float8_dtype, round_scales_to_power_of_2)  # its own error
        # torchao's first two operators, where a DTensor amax is all-reduced (in float64)
        scale = torch.clamp(amax.to(torch.float64), min=float8_utils.EPS).to(torch.float32)
        if round_scales_to_power_of_2:
            scale = float8_utils._round_scale_down_to_power_of_2(scale)
        return scale

    with patched(float8_utils, "amax_to_scale", amax_to_scale):
        yield
