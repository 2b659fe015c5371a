"""The ``LoopRules`` the settings ask for: Megatron-LM's recomputation and clipping, and
torch.compile."""

from __future__ import annotations

from overdrive.compile.model import compile_step
from overdrive.config.settings import Settings
from overdrive.parallel.megatron_options import megatron_rules
from overdrive.strategies.rules import LoopRules


def rules_from_settings(settings: Settings) -> LoopRules:
    """What every strategy applies to each model and step, whatever its backend."""
    megatron = megatron_rules(settings)
    return LoopRules(
        recompute=megatron.recompute,
        clip_grad_norm=megatron.clip_grad_norm,
        compile=compile_step(settings),
    )
