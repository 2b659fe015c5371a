"""Backends as strategies: pick one from the resolved settings and the running world."""

from __future__ import annotations

from overdrive.backends import check_available
from overdrive.config import Settings
from overdrive.parallel.decide import decide_layout
from overdrive.parallel.topology import Topology
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

    The layout is decided once from the settings (``decide_layout``, which refuses what
    cannot run, as the launcher's plan does); the tensor-parallel and pipeline settings take
    its degrees with what ``options`` gives in code; a table (``strategies/choice.py``) picks
    the strategy class, which gets the layout's ``Topology``: the pipeline strategy for a
    pipeline degree above 1, DeepSpeed when asked for, the mesh strategy (FSDP, HSDP, tensor
    parallelism, Megatron-LM's distributed optimizer), DDP on several processes, else one
    device. A backend that is asked for but not built yet is an error naming the setting and
    where it came from.
    """
    check_available(settings)
    rules = rules_from_settings(settings)
    layout = decide_layout(settings, state.num_processes)
    choice = Choice(
        device=state.device,
        settings=settings,
        topology=Topology(layout, state.device.type),
        options=options,
        pp=pp_settings(settings, layout.pp, options),
        tp=tp_settings(settings, layout.tp, options),
        rules=rules,
    )
    return BUILDERS[kind(choice)](choice)
