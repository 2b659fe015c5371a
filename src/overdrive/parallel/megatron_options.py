"""What ``megatron_lm_config`` asks of every MEGATRON_LM strategy, whatever its degrees:
recompute the repeated layers' activations in backward, and clip the gradients by their
global norm before each optimizer step (as Megatron-LM's optimizer does). Both reach the
strategy in its ``LoopRules`` (``strategies/rules_from_settings.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.parallel.activation_checkpointing import RecomputeLayers

if TYPE_CHECKING:
    from overdrive.config.settings import Settings

RECOMPUTE_KEY = "megatron_lm_config.recompute_activations"
CLIP_KEY = "megatron_lm_config.gradient_clipping"


@dataclass(frozen=True)
class MegatronRules:
    """``recompute``: the repeated layers that recompute their activations in backward;
    ``clip_grad_norm``: the max norm gradients are clipped to before each step (None: none)."""

    recompute: RecomputeLayers | None = None
    clip_grad_norm: float | None = None


def megatron_rules(settings: Settings) -> MegatronRules:
    """The rules under ``distributed_type: MEGATRON_LM``; none under any other backend
    (where ``megatron_lm_config`` is reported as unable to take effect)."""
    if requested_backend(settings) is not DistributedType.MEGATRON_LM:
        return MegatronRules()
    clip = settings[CLIP_KEY]
    source = str(settings.source(RECOMPUTE_KEY))
    return MegatronRules(
        recompute=RecomputeLayers(RECOMPUTE_KEY, source) if settings[RECOMPUTE_KEY] else None,
        clip_grad_norm=float(clip) if clip else None,  # 0 turns clipping off, as in Megatron
    )
