"""What ``megatron_lm_config`` asks of every MEGATRON_LM strategy, whatever its degrees:
recompute the repeated layers' activations in backward, and clip the gradients by their
global norm before each optimizer step (as Megatron-LM's optimizer does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RECOMPUTE_KEY = "megatron_lm_config.recompute_activations"
CLIP_KEY = "megatron_lm_config.gradient_clipping"


@dataclass(frozen=True)
class MegatronOptions:
    """``recompute_activations`` and ``gradient_clipping`` (a max norm, or None: off)."""

    recompute_activations: bool = False
    gradient_clipping: float | None = None
    recompute_source: str = "default"


def megatron_options(settings: Any) -> MegatronOptions | None:
    """The options under ``distributed_type: MEGATRON_LM``; None under any other backend
    (where ``megatron_lm_config`` is reported as unable to take effect)."""
    if settings["distributed_type"] != "MEGATRON_LM":
        return None
    clip = settings[CLIP_KEY]
    return MegatronOptions(
        recompute_activations=bool(settings[RECOMPUTE_KEY]),
        gradient_clipping=float(clip) if clip else None,  # 0 turns clipping off, as in Megatron
        recompute_source=str(settings.source(RECOMPUTE_KEY)),
    )
