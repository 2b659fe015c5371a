"""Turning ``Accelerator(...)`` arguments into settings, handlers and a project configuration."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from overdrive.config import Settings
from overdrive.errors import ConfigError
from overdrive.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from overdrive.plugins import ProjectConfiguration
from overdrive.precision import FP8RecipeKwargs

_HANDLER_TYPES = (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    AutocastKwargs,
    InitProcessGroupKwargs,
)


def code_settings(args: dict[str, Any], plugins: Iterable[Any]) -> dict[str, Any]:
    """Canonical setting key -> value for everything given in code (None = not given)."""
    code = {
        "mixed_precision": args["mixed_precision"],
        "gradient_accumulation_steps": args["gradient_accumulation_steps"],
        "use_cpu": args["cpu"],
        "split_batches": args["split_batches"],
        "project_dir": args["project_dir"],
        "logging_dir": args["logging_dir"],
        "dynamo_config.dynamo_backend": args["dynamo_backend"],
        "num_processes": args["num_processes"],
        "debug": args["debug"],
    }
    log_with = args["log_with"]
    names = [log_with] if isinstance(log_with, str) else list(log_with or [])
    if names and all(isinstance(n, str) for n in names):
        code["log_with"] = names
    for plugin in plugins:
        if plugin is None:
            continue
        for key, value in plugin.to_settings().items():
            if code.get(key) is not None and code[key] != value:
                raise ConfigError(
                    f"`{key}` is given twice in code with different values: {code[key]!r} and "
                    f"{value!r} (from {type(plugin).__name__})",
                    key=key,
                    fix=f"pass {key} in one place only",
                )
            code[key] = value
    return {k: v for k, v in code.items() if v is not None}


def sort_handlers(handlers: Iterable[Any] | None) -> dict[type, Any]:
    """``kwargs_handlers`` keyed by handler type; a type given twice is an error."""
    out: dict[type, Any] = {}
    for handler in handlers or ():
        if not isinstance(handler, (KwargsHandler, FP8RecipeKwargs)):
            raise ConfigError(
                f"kwargs_handlers got {handler!r}, which is not a kwargs handler",
                key="kwargs_handlers",
                fix="pass objects such as DistributedDataParallelKwargs(...), "
                "GradScalerKwargs(...) or FP8RecipeKwargs(...)",
            )
        kind = next((t for t in _HANDLER_TYPES if isinstance(handler, t)), type(handler))
        if kind in out:
            raise ConfigError(
                f"kwargs_handlers holds two {kind.__name__} objects",
                key="kwargs_handlers",
                fix=f"pass one {kind.__name__} with all its arguments",
            )
        out[kind] = handler
    return out


def project_configuration(
    settings: Settings, given: ProjectConfiguration | None
) -> ProjectConfiguration:
    """The project configuration with resolved values (logging_dir defaults under project_dir)."""
    project_dir = settings["project_dir"]
    logging_dir = settings["logging_dir"]
    if logging_dir is None and project_dir is not None:
        logging_dir = f"{project_dir}/logs"
    return ProjectConfiguration(
        project_dir=project_dir,
        logging_dir=logging_dir,
        automatic_checkpoint_naming=settings["automatic_checkpoint_naming"],
        total_limit=settings["total_limit"],
        iteration=given.iteration if given else 0,
        save_on_each_node=given.save_on_each_node if given else False,
    )


def export_for_transformers(settings: Settings, distributed_type: Any) -> None:
    """Tell transformers' ``from_pretrained`` to build empty models on processes other than
    the main one when FSDP loads CPU-RAM-efficiently (the variables it reads; we only write)."""
    if distributed_type == "FSDP" and settings["fsdp_config.fsdp_cpu_ram_efficient_loading"]:
        os.environ["ACCELERATE_USE_FSDP"] = "true"
        os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "true"
