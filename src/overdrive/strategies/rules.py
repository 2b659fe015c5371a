"""What a strategy applies to every model and step whatever its backend and degrees.

Fixed when the strategy is built, from settings the strategy itself does not read (today
``megatron_lm_config``'s recomputation and clipping: ``parallel/megatron_options.py``), so
the same loop behaves the same on any layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class LoopRules:
    """``before_wrap`` runs once on each model that trains, before the backend wraps it
    (activation recomputation); ``clip_grad_norm`` is the max norm the gradients are clipped
    to before every optimizer step (None: no clipping)."""

    before_wrap: Callable[[nn.Module], None] | None = None
    clip_grad_norm: float | None = None


NO_RULES = LoopRules()
