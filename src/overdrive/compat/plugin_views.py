"""The backend plugins as Hugging Face Accelerate exposes them after start-up: filled in from
the resolved settings, so code that reads ``accelerator.state.fsdp_plugin`` (transformers'
Trainer does, to choose its checkpoint format) sees the backend this run really uses."""

from __future__ import annotations

import copy
from typing import Any

from overdrive.arguments.plugins import DeepSpeedPlugin, FullyShardedDataParallelPlugin
from overdrive.config import Settings
from overdrive.config.types import DistributedType
from overdrive.utils.deepspeed import HfDeepSpeedConfig


def effective_fsdp_plugin(
    given: FullyShardedDataParallelPlugin | None, settings: Settings, distributed_type: Any
) -> FullyShardedDataParallelPlugin | None:
    """The FSDP plugin in force: a copy of ``given`` (or a new one) with every field it left
    unset taken from the settings; None when this run is not FSDP."""
    if distributed_type != DistributedType.FSDP:
        return None
    # A copy: the user's object may configure another Accelerator later, and must not carry
    # this run's resolved values into it as if they were given in code.
    plugin = copy.copy(given) if given is not None else FullyShardedDataParallelPlugin()
    for field, key in plugin.KEYS.items():
        if getattr(plugin, field) is None:
            setattr(plugin, field, settings[key])
    return plugin


def effective_deepspeed_plugin(given: Any, settings: Settings, strategy: Any) -> Any:
    """The DeepSpeed plugin in force: a copy of ``given`` (or a new one) holding the config this run
    resolved as ``hf_ds_config`` (unless transformers already put its own there); None when
    this run is not DeepSpeed. Trainer takes its DeepSpeed path (the engine's own checkpoints,
    which hold every process's optimizer partition) only when it finds one."""
    resolved: Any = getattr(strategy, "config", None)
    if not isinstance(getattr(resolved, "config", None), dict):
        return given

    plugin: Any = copy.copy(given) if given is not None else DeepSpeedPlugin()
    for field, key in plugin.KEYS.items():
        if getattr(plugin, field) is None:
            setattr(plugin, field, settings[key])
    plugin.zero_stage = resolved.zero_stage
    if not isinstance(getattr(plugin.hf_ds_config, "config", None), dict):
        plugin.hf_ds_config = HfDeepSpeedConfig(copy.deepcopy(resolved.config))
    plugin.deepspeed_config = plugin.hf_ds_config.config
    strategy.exposed_plugin = plugin  # read at prepare: the values a caller filled in
    return plugin


def expose_plugins(
    state: Any, settings: Settings, strategy: Any, fsdp_plugin: Any, deepspeed_plugin: Any
) -> tuple[FullyShardedDataParallelPlugin | None, Any]:
    """Put the plugins in force on ``state`` (as ``state.fsdp_plugin`` / ``deepspeed_plugin``,
    where Hugging Face Accelerate keeps them); returns both."""
    state.fsdp_plugin = effective_fsdp_plugin(fsdp_plugin, settings, state.distributed_type)
    state.deepspeed_plugin = effective_deepspeed_plugin(deepspeed_plugin, settings, strategy)
    return state.fsdp_plugin, state.deepspeed_plugin
