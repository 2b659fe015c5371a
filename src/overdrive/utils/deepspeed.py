"""``accelerate.utils.deepspeed``: the config reader and wrappers transformers builds on."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from overdrive.config.types import DistributedType
from overdrive.ds.dummies import DummyOptim, DummyScheduler
from overdrive.ds.helpers import DeepSpeedEngineWrapper, map_pytorch_optim_to_deepspeed
from overdrive.errors import ConfigError

__all__ = [
    "DeepSpeedEngineWrapper",
    "DeepSpeedOptimizerWrapper",
    "DeepSpeedSchedulerWrapper",
    "DummyOptim",
    "DummyScheduler",
    "HfDeepSpeedConfig",
    "get_active_deepspeed_plugin",
    "map_pytorch_optim_to_deepspeed",
]


def get_active_deepspeed_plugin(state: Any) -> Any:
    """The DeepSpeed plugin ``state`` (an ``AcceleratorState``/``PartialState``) runs with: the
    selected one of several, or the only one. ValueError when the state is not DeepSpeed."""
    if state.distributed_type != DistributedType.DEEPSPEED:
        raise ValueError(
            "Couldn't retrieve the active `DeepSpeedPlugin` as none were enabled. Please make "
            "sure that either `Accelerator` is configured for `deepspeed` or make sure that the "
            "desired `DeepSpeedPlugin` has been enabled "
            "(`AcceleratorState().select_deepspeed_plugin(name)`) before calling this function."
        )
    plugins = getattr(state, "deepspeed_plugins", None)
    if plugins is None:
        return getattr(state, "deepspeed_plugin", None)
    if not isinstance(plugins, dict):
        return plugins
    return next(plugin for plugin in plugins.values() if getattr(plugin, "selected", False))


class HfDeepSpeedConfig:
    """A DeepSpeed JSON (path or dict) with dotted lookups (``get_value("zero_optimization.stage")``)."""

    def __init__(self, config_file_or_dict: str | dict[str, Any]) -> None:
        if isinstance(config_file_or_dict, dict):
            config = dict(config_file_or_dict)
        elif isinstance(config_file_or_dict, str) and os.path.exists(config_file_or_dict):
            with open(config_file_or_dict, encoding="utf-8") as f:
                config = json.load(f)
        else:
            try:
                config = json.loads(str(config_file_or_dict))
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"deepspeed config {config_file_or_dict!r} is neither a dict, an existing JSON file nor JSON text",
                    key="deepspeed",
                    fix="pass the path of a DeepSpeed JSON file or a dict",
                ) from exc
        self.config = config
        self._stage = self.get_value("zero_optimization.stage", -1)
        offload_devices = {
            self.get_value("zero_optimization.offload_optimizer.device"),
            self.get_value("zero_optimization.offload_param.device"),
        }
        self._offload = bool(offload_devices & {"cpu", "nvme"})

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        """The dict holding the last part of a dotted key, and that part."""
        config: Any = self.config
        *nodes, key = ds_key_long.split(".")
        for node in nodes:
            config = config.get(node) if isinstance(config, dict) else None
            if config is None:
                return None, key
        return config, key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        config, key = self.find_config_node(ds_key_long)
        return default if config is None else config.get(key, default)

    def del_config_sub_tree(self, ds_key_long: str, must_exist: bool = False) -> None:
        config, key = self.find_config_node(ds_key_long)
        if config is None or key not in config:
            if must_exist:
                raise ValueError(f"Can't find {ds_key_long} entry in the config: {self.config}")
            return
        del config[key]

    def is_true(self, ds_key_long: str) -> bool:
        return (
            bool(self.get_value(ds_key_long)) if self.get_value(ds_key_long) is not None else False
        )

    def is_false(self, ds_key_long: str) -> bool:
        value = self.get_value(ds_key_long)
        return False if value is None else not bool(value)

    def is_zero2(self) -> bool:
        return bool(self._stage == 2)

    def is_zero3(self) -> bool:
        return bool(self._stage == 3)

    def is_offload(self) -> bool:
        return self._offload


class DeepSpeedOptimizerWrapper:
    """The optimizer handed back when DeepSpeed's engine steps it: ``step``/``zero_grad`` do nothing."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """The engine zeroes gradients in its own step."""

    def step(self) -> None:
        """The engine steps in its own step."""

    @property
    def step_was_skipped(self) -> bool:
        return bool(getattr(self.optimizer, "overflow", False))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.optimizer.param_groups)


class DeepSpeedSchedulerWrapper:
    """The scheduler handed back when DeepSpeed's engine steps it: ``step`` does nothing."""

    def __init__(self, scheduler: Any, optimizers: Any = None) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["scheduler"], name)

    def step(self, *args: Any, **kwargs: Any) -> None:
        """The engine steps the scheduler in its own step."""
