"""Backends as strategies: pick one from the resolved settings and the running world."""

from __future__ import annotations

from overdrive.config import Settings
from overdrive.parallel.topology import Topology
from overdrive.preflight.backends import check_available
from overdrive.strategies.base import Strategy
from overdrive.strategies.chain_settings import pp_settings, tp_settings
from overdrive.strategies.choice import BUILDERS, Choice, kind
from overdrive.strategies.ddp import DDPStrategy
from overdrive.strategies.options import NO_OPTIONS, ProcessInfo, StrategyOptions
from overdrive.strategies.rules_from_settings import rules_from_settings
from overdrive.strategies.single import SingleDeviceStrategy

__all__ = [
    "DDPStrategy",
    "ProcessInfo",
    "SingleDeviceStrategy",
    "Strategy",
    "StrategyOptions",
    "check_available",
    "select_strategy",
]


def select_strategy(
    state: ProcessInfo, settings: Settings, options: StrategyOptions = NO_OPTIONS
) -> Strategy:
    """The strategy for this run on ``state.num_processes`` processes of ``state.device``.

    The process's decision (``state.decision``: made once by ``decide_layout`` when the
    state was, which refuses what cannot run, as the launcher's plan does) gives the layout;
    the tensor-parallel and pipeline settings take its degrees with what ``options`` gives in
    code; a table (``strategies/choice.py``) picks the strategy class from the decision,
    which gets the layout's ``Topology``: the pipeline strategy for a
    pipeline degree above 1, DeepSpeed when asked for, the mesh strategy (FSDP, HSDP, tensor
    parallelism, Megatron-LM's distributed optimizer), DDP on several processes, else one
    device. A backend that is asked for but not built yet is an error naming the setting and
    where it came from.
    """
    check_available(settings)
    rules = rules_from_settings(settings)
    decision = state.decision
    choice = Choice(
        device=state.device,
        settings=settings,
        decision=decision,
        topology=Topology(decision.layout, state.device.type),
        options=options,
        pp=pp_settings(settings, decision, options),
        tp=tp_settings(settings, decision, options),
        rules=rules,
    )
    return BUILDERS[kind(choice)](choice)
