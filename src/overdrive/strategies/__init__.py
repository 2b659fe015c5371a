"""Backends as strategies: pick one from the resolved settings and the running world."""

from __future__ import annotations

from typing import Any

from overdrive.config import Settings
from overdrive.errors import ConfigError
from overdrive.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.strategies.base import Strategy
from overdrive.strategies.ddp import DDPStrategy
from overdrive.strategies.single import SingleDeviceStrategy

__all__ = [
    "DDPStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "check_available",
    "select_strategy",
]

_NOT_BUILT = {
    "FSDP": "fully sharded data parallel (FSDP)",
    "DEEPSPEED": "DeepSpeed",
    "MEGATRON_LM": "Megatron-LM tensor/pipeline parallelism",
    "XLA": "XLA (TPU)",
}


def check_available(settings: Settings) -> None:
    """Raise if the settings ask for a backend this version cannot run (before any set-up)."""
    requested = settings["distributed_type"]
    if requested not in _NOT_BUILT:
        return
    source = settings.source("distributed_type")
    raise ConfigError(
        f"distributed_type {requested} ({_NOT_BUILT[requested]}) is not available yet in "
        f"this version of overdrive; it was set by {source}",
        key="distributed_type",
        fix=f"remove that setting ({source}) to train with DDP (several processes) or on "
        "one device",
    )


def select_strategy(
    state: Any,
    settings: Settings,
    *,
    ddp_kwargs: DistributedDataParallelKwargs | None = None,
) -> Strategy:
    """The strategy for this run: DDP when several processes run, else one device.

    ``state`` is the process state (``num_processes``, ``device``). A backend that is asked
    for but not built yet is an error naming the setting and where it came from.
    """
    check_available(settings)
    if state.num_processes > 1:
        return DDPStrategy(state.device, ddp_kwargs)
    return SingleDeviceStrategy(state.device)
