"""What a strategy applies to every model and step whatever its backend and degrees.

Fixed when the strategy is built, from settings the strategy itself does not read
(``megatron_lm_config``'s recomputation and clipping: ``parallel/megatron_options.py``;
``dynamo_config``'s torch.compile: ``overdrive.compile``), so the same loop behaves the same
on any layout. Built by ``strategies/rules_from_settings.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from overdrive.compile import CompileStep


@dataclass(frozen=True)
class LoopRules:
    """``before_wrap`` runs once on each model that trains, before the backend wraps it
    (activation recomputation); ``clip_grad_norm`` is the max norm the gradients are clipped
    to before every optimizer step (None: no clipping); ``compile`` compiles each prepared
    model once it is wrapped (the chain's last step; ``Strategy.wrap_model`` for a strategy
    that does not run the chain)."""

    before_wrap: Callable[[nn.Module], None] | None = None
    clip_grad_norm: float | None = None
    compile: CompileStep | None = None  # dynamo_config's torch.compile, the chain's last step


NO_RULES = LoopRules()
