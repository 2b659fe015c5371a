"""The ``LoopRules`` the settings ask for: Megatron-LM's recomputation and clipping, and
torch.compile."""

from __future__ import annotations

from dataclasses import replace

from overdrive.compile import compile_step
from overdrive.config.settings import Settings
from overdrive.parallel.megatron_options import megatron_rules
from overdrive.strategies.rules import LoopRules


def rules_from_settings(settings: Settings) -> LoopRules:
    """What every strategy applies to each model and step, whatever its backend."""
    return replace(megatron_rules(settings), compile=compile_step(settings))
