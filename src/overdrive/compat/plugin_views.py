"""The backend plugins as the described system exposes them after start-up: filled in from
the resolved settings, so code that reads ``accelerator.state.fsdp_plugin`` (transformers'
Trainer does, to choose its checkpoint format) sees the backend this run really uses."""

from __future__ import annotations

from typing import Any

from overdrive.config import Settings
from overdrive.plugins import FullyShardedDataParallelPlugin


def effective_fsdp_plugin(
    given: FullyShardedDataParallelPlugin | None, settings: Settings, distributed_type: Any
) -> FullyShardedDataParallelPlugin | None:
    """The FSDP plugin in force: ``given`` (or a new one) with every field it left unset taken
    from the settings; None when this run is not FSDP."""
    if distributed_type != "FSDP":
        return None
    plugin = given if given is not None else FullyShardedDataParallelPlugin()
    for field, key in plugin.KEYS.items():
        if getattr(plugin, field) is None:
            setattr(plugin, field, settings[key])
    return plugin


def expose_plugins(
    state: Any, settings: Settings, fsdp_plugin: Any, deepspeed_plugin: Any
) -> FullyShardedDataParallelPlugin | None:
    """Put the plugins in force on ``state`` (as ``state.fsdp_plugin`` / ``deepspeed_plugin``,
    where the described system keeps them); returns the FSDP one."""
    state.fsdp_plugin = effective_fsdp_plugin(fsdp_plugin, settings, state.distributed_type)
    state.deepspeed_plugin = deepspeed_plugin
    return state.fsdp_plugin
