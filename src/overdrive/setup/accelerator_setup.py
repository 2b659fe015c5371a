"""Turning ``Accelerator(...)`` arguments into settings, handlers and a project configuration."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from overdrive.arguments.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from overdrive.arguments.plugins import GradientAccumulationPlugin, ProjectConfiguration
from overdrive.config import Settings
from overdrive.config.provenance import Labelled
from overdrive.errors import ConfigError
from overdrive.precision import FP8RecipeKwargs
from overdrive.strategies import StrategyOptions, select_strategy

if TYPE_CHECKING:
    from overdrive.parallel.decide import Decision
    from overdrive.strategies import ProcessInfo, Strategy

_HANDLER_TYPES = (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    AutocastKwargs,
    InitProcessGroupKwargs,
    FP8RecipeKwargs,  # AORecipeKwargs and the compat FP8RecipeKwargs are recipes too
)


# Accelerator argument -> the setting it sets (the rest come from plugins and log_with).
_ARGUMENTS = {
    "mixed_precision": "mixed_precision",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "cpu": "use_cpu",
    "project_dir": "project_dir",
    "logging_dir": "logging_dir",
    "dynamo_backend": "dynamo_config.dynamo_backend",
    "num_processes": "num_processes",
    "debug": "debug",
}


def warn_split_batches_argument_ignored() -> None:
    """``Accelerator(split_batches=True)`` does what it does in Hugging Face Accelerate 1.x:
    nothing. Said once, with the argument that does split."""
    warnings.warn(
        "Accelerator(split_batches=True) is accepted and ignored, as in Hugging Face "
        "Accelerate: batches are not split between processes. To split each batch, pass "
        "dataloader_config=DataLoaderConfiguration(split_batches=True).",
        UserWarning,
        stacklevel=3,
    )


def _plugin_labels(argument: str, plugin: Any, keys: Iterable[str]) -> dict[str, str]:
    """``Accelerator(fsdp_plugin=...)`` for the switch, ``...Plugin(field=...)`` for fields."""
    fields = {key: name for name, key in plugin.KEYS.items()}
    fields.setdefault("deepspeed_config.deepspeed_config_file", "hf_ds_config")
    cls = type(plugin).__name__
    return {
        key: f"Accelerator({argument}={cls}({fields[key]}=...))"
        if key in fields
        else f"Accelerator({argument}=...)"
        for key in keys
    }


def code_settings(args: dict[str, Any], plugins: Iterable[Any]) -> Labelled:
    """Canonical setting key -> value for everything given in code (None = not given).

    Each value is labelled with the argument that set it, as the user wrote it:
    ``Accelerator(cpu=...)``, ``Accelerator(fsdp_plugin=...)``.
    """
    code = {key: args[name] for name, key in _ARGUMENTS.items()}
    labels = {key: f"Accelerator({name}=...)" for name, key in _ARGUMENTS.items()}
    log_with = args["log_with"]
    names = [log_with] if isinstance(log_with, str) else trackers_given(log_with) or []
    if names and all(isinstance(n, str) for n in names):
        code["log_with"] = names
        labels["log_with"] = "Accelerator(log_with=...)"
    dynamo = args.get("dynamo_plugin")
    if (
        dynamo is not None
        and getattr(dynamo, "backend", None)
        and code.get("dynamo_config.dynamo_backend") is None
    ):
        # TorchDynamoPlugin carries the backend as a setting; its other fields are torch.compile options
        code["dynamo_config.dynamo_backend"] = str(dynamo.backend).lower()
        labels["dynamo_config.dynamo_backend"] = "Accelerator(dynamo_plugin=...)"
    regional = "dynamo_config.dynamo_use_regional_compilation"
    if dynamo is not None and getattr(dynamo, "use_regional_compilation", None) is not None:
        code[regional] = bool(dynamo.use_regional_compilation)
        labels[regional] = "Accelerator(dynamo_plugin=...)"
    for plugin in plugins:
        if plugin is None:
            continue
        argument = next((k for k, v in args.items() if v is plugin), type(plugin).__name__)
        given = plugin.to_settings()
        plugin_labels = _plugin_labels(argument, plugin, given)
        for key, value in given.items():
            if code.get(key) is not None:
                if code[key] != value:
                    raise ConfigError(
                        f"`{key}` is given twice in code with different values: "
                        f"{code[key]!r} ({labels[key]}) and {value!r} ({plugin_labels[key]})",
                        key=key,
                        fix=f"pass {key} in one place only",
                    )
                continue  # the same value twice: the first place that gave it is named
            code[key] = value
            labels[key] = plugin_labels[key]
    return Labelled({k: v for k, v in code.items() if v is not None}, labels)


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
    """The project configuration with resolved values (logging_dir defaults to project_dir,
    as in Hugging Face Accelerate: a run ``exp`` under ``project_dir='runs'`` logs to
    ``runs/exp``)."""
    project_dir = settings["project_dir"]
    logging_dir = settings["logging_dir"]
    if logging_dir is None and project_dir is not None:
        logging_dir = str(project_dir)
    return ProjectConfiguration(
        project_dir=project_dir,
        logging_dir=logging_dir,
        automatic_checkpoint_naming=settings["automatic_checkpoint_naming"],
        total_limit=settings["total_limit"],
        iteration=given.iteration if given else 0,
        save_on_each_node=given.save_on_each_node if given else False,
        checkpoint_format=settings["checkpoint_format"],
    )


def trackers_given(log_with: Any) -> list[Any] | None:
    """``log_with`` given in code as a list (a tracker instance alone becomes a list of one);
    None for a name (the settings hold it) or nothing."""
    if log_with is None or isinstance(log_with, str):
        return None
    return list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]


def checked_accumulation_plugin(plugin: GradientAccumulationPlugin | None) -> Any:
    """``plugin`` (or the default one), refused when it asks for what cannot take effect.
    ``adjust_scheduler=False`` with ``num_steps=1`` is accepted: a window of one micro-batch
    never skips a step, so there is nothing to adjust (transformers' Trainer passes that)."""
    plugin = plugin or GradientAccumulationPlugin()
    if not plugin.adjust_scheduler and plugin.num_steps != 1:
        raise ConfigError(
            "GradientAccumulationPlugin(adjust_scheduler=False) cannot take effect: a "
            "prepared scheduler always advances once per optimizer step that really ran",
            key="adjust_scheduler",
            fix="drop adjust_scheduler, or pass step_scheduler_with_optimizer=False to "
            "Accelerator to advance the scheduler on every scheduler.step() call",
        )
    return plugin


def export_for_transformers(decision: Decision) -> None:
    """Tell transformers' ``from_pretrained`` to build empty models on processes other than
    the main one when FSDP loads CPU-RAM-efficiently (the variables it reads; we only write)."""
    if decision.chain.fill_from_main:
        os.environ["ACCELERATE_USE_FSDP"] = "true"
        os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "true"


def strategy_for(
    state: ProcessInfo,
    settings: Settings,
    handlers: dict[type, Any],
    fsdp_plugin: Any,
    deepspeed_plugin: Any,
    parallelism_config: Any,
    megatron_lm_plugin: Any,
) -> Strategy:
    """The strategy for this run, with what the plugins give in code (a wrap policy, a
    DeepSpeed config dict, a tensor-parallel plan, a pipeline loss and split points),
    gathered once into ``StrategyOptions``."""
    options = StrategyOptions(
        ddp_kwargs=handlers.get(DistributedDataParallelKwargs),
        fsdp_wrap=callable_wrap_policy(fsdp_plugin),
        ds_config=getattr(deepspeed_plugin, "hf_ds_config", None),
        tp_plan=getattr(parallelism_config, "tp_plan", None),
        sequence_parallel=bool(getattr(parallelism_config, "sequence_parallel", False)),
        **pipeline_from_code(parallelism_config, megatron_lm_plugin),
    )
    return select_strategy(state, settings, options)


def pipeline_from_code(parallelism_config: Any, megatron_lm_plugin: Any) -> dict[str, Any]:
    """The pipeline's loss and split points given in code, by ``ParallelismConfig(pp_loss_fn=,
    pp_split_points=)`` or ``MegatronLMPlugin(pipeline_loss_fn=, pipeline_split_points=)``;
    the same one given by both is refused (which would win is not obvious)."""
    chosen: dict[str, Any] = {}
    for ours, theirs in (
        ("pp_loss_fn", "pipeline_loss_fn"),
        ("pp_split_points", "pipeline_split_points"),
    ):
        in_config = getattr(parallelism_config, ours, None)
        in_plugin = getattr(megatron_lm_plugin, theirs, None)
        if in_config is not None and in_plugin is not None:
            raise ConfigError(
                f"the pipeline's {theirs.removeprefix('pipeline_')} is given twice, by "
                f"ParallelismConfig({ours}=...) and by MegatronLMPlugin({theirs}=...), in code",
                key=ours,
                fix=f"keep one of them: ParallelismConfig({ours}=...) whatever the backend, or "
                f"MegatronLMPlugin({theirs}=...) under MEGATRON_LM",
            )
        chosen[ours] = in_config if in_config is not None else in_plugin
    return chosen


def callable_wrap_policy(plugin: Any) -> Any:
    """A callable ``auto_wrap_policy`` given to ``FullyShardedDataParallelPlugin`` in code."""
    policy = getattr(plugin, "auto_wrap_policy", None)
    return policy if callable(policy) else None


def registrable(objects: Iterable[Any]) -> list[Any]:
    """``objects`` for register_for_checkpointing: each needs state_dict and load_state_dict."""
    objects = list(objects)
    bad = [
        (i, o)
        for i, o in enumerate(objects)
        if not (
            callable(getattr(o, "state_dict", None))
            and callable(getattr(o, "load_state_dict", None))
        )
    ]
    if bad:
        listed = "".join(f"\n- Item at index {i}, `{o}`" for i, o in bad)
        raise ValueError(
            "All `objects` must include a `state_dict` and `load_state_dict` function to be "
            f"stored. The following inputs are invalid:{listed}"
        )
    return objects
