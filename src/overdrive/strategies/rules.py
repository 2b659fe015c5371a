"""What a strategy applies to every model and step whatever its backend and degrees.

Fixed when the strategy is built, from settings the strategy itself does not read
(``megatron_lm_config``'s recomputation and clipping: ``parallel/megatron_options.py``;
``dynamo_config``'s torch.compile: ``overdrive.compile.model``), so the same loop behaves the same
on any layout. Built by ``strategies/rules_from_settings.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from overdrive.compile.model import CompileStep
from overdrive.parallel.activation_checkpointing import RecomputeLayers


@dataclass(frozen=True)
class LoopRules:
    """``recompute``: the layers of each model that trains recompute their activations in
    backward (the chain's activation-checkpointing step); ``clip_grad_norm`` is the max norm
    the gradients are clipped to before every optimizer step (None: no clipping);
    ``compile``: the chain's compile step for every prepared model."""

    recompute: RecomputeLayers | None = None
    clip_grad_norm: float | None = None
    compile: CompileStep | None = None  # dynamo_config's torch.compile


NO_RULES = LoopRules()
