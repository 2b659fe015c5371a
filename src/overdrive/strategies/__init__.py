"""Backends as strategies: pick one from the resolved settings and the running world."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from overdrive.backends import check_available
from overdrive.config import Settings
from overdrive.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.strategies.base import Strategy
from overdrive.strategies.ddp import DDPStrategy
from overdrive.strategies.rules import NO_RULES, LoopRules
from overdrive.strategies.single import SingleDeviceStrategy

__all__ = [
    "DDPStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "check_available",
    "select_strategy",
]


def select_strategy(
    state: Any,
    settings: Settings,
    *,
    ddp_kwargs: DistributedDataParallelKwargs | None = None,
    fsdp_wrap: Callable[..., Any] | None = None,
    deepspeed_plugin: Any = None,
    tp_plan: dict[str, str] | None = None,
    sequence_parallel: bool = False,
    pp_loss_fn: Callable[..., Any] | None = None,
    pp_split_points: list[int] | None = None,
) -> Strategy:
    """The strategy for this run: FSDP or DeepSpeed when asked for, DDP when several processes
    run, else one device. ``fsdp_wrap`` is a callable wrap policy given in code;
    ``deepspeed_plugin.hf_ds_config`` may hold a DeepSpeed config dict given in code;
    ``tp_plan`` is a tensor-parallel plan given in code (``ParallelismConfig(tp_plan=...)``);
    ``sequence_parallel`` asks for sequence parallelism in code
    (``ParallelismConfig(sequence_parallel=True)``);
    ``pp_loss_fn`` and ``pp_split_points`` the pipeline's loss and stage starts
    (``MegatronLMPlugin(pipeline_loss_fn=..., pipeline_split_points=...)``).

    ``state`` is the process state (``num_processes``, ``device``). A backend that is asked
    for but not built yet is an error naming the setting and where it came from.
    """
    from overdrive.parallel.megatron_options import megatron_rules

    check_available(settings)
    rules = megatron_rules(settings)
    return (
        _pipeline_parallel(
            state,
            settings,
            pp_loss_fn,
            pp_split_points,
            fsdp_wrap,
            tp_plan,
            sequence_parallel,
            rules=rules,
        )
        or _tensor_parallel(state, settings, fsdp_wrap, tp_plan, sequence_parallel, rules=rules)
        or _data_parallel(state, settings, ddp_kwargs, fsdp_wrap, deepspeed_plugin, rules=rules)
    )


def _data_parallel(
    state: Any,
    settings: Settings,
    ddp_kwargs: DistributedDataParallelKwargs | None,
    fsdp_wrap: Callable[..., Any] | None,
    deepspeed_plugin: Any,
    *,
    rules: LoopRules = NO_RULES,
) -> Strategy:
    """FSDP or DeepSpeed when asked for, DDP on several processes, else one device."""
    from overdrive.parallel.layout import ParallelLayout, layout_from_settings
    from overdrive.parallel.topology import Topology

    # every process its own data-parallel rank: one process, DDP, and DeepSpeed's ZeRO
    replicas = Topology(ParallelLayout(dp_replicate=state.num_processes), state.device.type)

    if settings["distributed_type"] == "FSDP":
        from overdrive.parallel.fsdp_policy import policy_from_settings
        from overdrive.strategies.fsdp import FSDPStrategy

        layout = layout_from_settings(settings, state.num_processes)
        policy = policy_from_settings(settings, fsdp_wrap)
        return FSDPStrategy(state.device, layout, policy, rules=rules)
    if settings["distributed_type"] == "DEEPSPEED":
        from overdrive.ds.config import build
        from overdrive.strategies.deepspeed import DeepSpeedStrategy

        given = getattr(deepspeed_plugin, "hf_ds_config", None)
        # transformers' TrainingArguments(deepspeed=...) passes its HfTrainerDeepSpeedConfig:
        # the JSON with Trainer's "auto"s filled; Trainer accumulates by itself.
        from_transformers = type(given).__module__.startswith("transformers.")
        if isinstance(getattr(given, "config", None), dict):  # an HfDeepSpeedConfig
            given = getattr(given, "config", None)
        label = {"code_label": "TrainingArguments(deepspeed=...)"} if from_transformers else {}
        code = given if isinstance(given, dict) else None
        config = build(settings, code_config=code, caller_accumulates=from_transformers, **label)
        zero3_init = bool(settings["deepspeed_config.zero3_init_flag"])
        return DeepSpeedStrategy(state.device, config, zero3_init=zero3_init, topology=replicas)
    if state.num_processes > 1 and settings["distributed_type"] == "MEGATRON_LM":
        layout = layout_from_settings(settings, state.num_processes)
        if layout.dp_shard > 1:  # use_distributed_optimizer without tp or pp degrees
            from overdrive.strategies.fsdp import FSDPStrategy
            from overdrive.strategies.tensor_parallel import distributed_optimizer_policy

            return FSDPStrategy(state.device, layout, distributed_optimizer_policy(), rules=rules)
    if state.num_processes > 1:
        return DDPStrategy(state.device, ddp_kwargs, replicas, rules=rules)
    return SingleDeviceStrategy(state.device, replicas, rules=rules)


def _sequence_setting(settings: Settings, in_code: bool) -> tuple[bool, str, str]:
    """(asked for, key, source) of sequence parallelism: in code, or (under MEGATRON_LM)
    ``megatron_lm_config.sequence_parallelism``."""
    key = "megatron_lm_config.sequence_parallelism"
    if in_code:
        return True, "sequence_parallel", "ParallelismConfig(sequence_parallel=True), in code"
    on = settings["distributed_type"] == "MEGATRON_LM" and settings[key] is True
    return on, key, str(settings.source(key))


def _tp_settings(
    settings: Settings, tp_plan: Any, sequence_parallel: bool, *, warn: bool = True
) -> Any:
    """The tensor-parallel settings when a degree above 1 is set, else None (saying once
    what a plan or sequence parallelism given without a degree cannot do)."""
    from overdrive.parallel.layout import tp_setting

    degree, key = tp_setting(settings)
    sp, sp_key, sp_source = _sequence_setting(settings, sequence_parallel)
    if degree <= 1:
        import warnings

        for what, given in (
            ("ParallelismConfig(tp_plan=...)", tp_plan is not None),
            (f"sequence parallelism ({sp_key}, from {sp_source})", sp),
        ):
            if given and warn:
                warnings.warn(
                    f"{what} cannot take effect: the tensor-parallel degree is 1 ({key}, "
                    f"from {settings.source(key)}); set tp_size to split the model",
                    UserWarning,
                    stacklevel=5,
                )
        return None
    from overdrive.parallel.tp_settings import TPSettings

    return TPSettings(
        degree=degree,
        key=key,
        source=str(settings.source(key)),
        plan=tp_plan,
        sequence_parallel=sp,
        sp_key=sp_key,
        sp_source=sp_source,
    )


def _tensor_parallel(
    state: Any,
    settings: Settings,
    fsdp_wrap: Callable[..., Any] | None,
    tp_plan: Any,
    sequence_parallel: bool = False,
    *,
    rules: LoopRules = NO_RULES,
) -> Strategy | None:
    """The tensor-parallel strategy when a degree above 1 is set (FSDP2 over dp, or
    replication), else None."""
    from overdrive.parallel.layout import layout_from_settings

    tp = _tp_settings(settings, tp_plan, sequence_parallel)
    if tp is None:
        return None
    from overdrive.strategies.tensor_parallel import (
        TensorParallelStrategy,
        distributed_optimizer_policy,
        replicate_policy,
    )

    layout = layout_from_settings(settings, state.num_processes)
    if settings["distributed_type"] == "FSDP":
        from overdrive.parallel.fsdp_policy import policy_from_settings

        policy = policy_from_settings(settings, fsdp_wrap)
    elif layout.dp_shard > 1:  # MEGATRON_LM use_distributed_optimizer
        policy = distributed_optimizer_policy()
    else:
        policy = replicate_policy()
    return TensorParallelStrategy(state.device, layout, policy, tp, rules=rules)


def _pipeline_parallel(
    state: Any,
    settings: Settings,
    loss_fn: Any,
    split_points: list[int] | None = None,
    fsdp_wrap: Callable[..., Any] | None = None,
    tp_plan: Any = None,
    sequence_parallel: bool = False,
    *,
    rules: LoopRules = NO_RULES,
) -> Strategy | None:
    """The pipeline strategy when a pipeline degree above 1 is set (``megatron_lm_config.
    pp_degree``, or ``parallelism_config.pp_size`` outside MEGATRON_LM), else None. Each
    stage runs the parallelize chain: tensor parallelism when a tp degree is set, then FSDP2
    under distributed_type FSDP (else the stage's replicas average their gradients)."""
    from overdrive.parallel.layout import (
        layout_from_settings,
        pp_key,
        pp_micro_batches,
        pp_setting,
    )

    degree = pp_setting(settings)
    # where a pipeline's loss and split points are given in code: the plugin that chose
    # MEGATRON_LM, else ParallelismConfig (which chooses no backend)
    owner, prefix = (
        ("MegatronLMPlugin", "pipeline")
        if settings["distributed_type"] == "MEGATRON_LM"
        else ("ParallelismConfig", "pp")
    )
    in_code = f"{owner}({prefix}_loss_fn=..., {prefix}_split_points=...)"
    if degree <= 1:
        if loss_fn is not None or split_points is not None:
            import warnings

            warnings.warn(
                f"a pipeline loss or split points given in code ({in_code}) cannot take "
                f"effect: there is no pipeline ({pp_key(settings)} is 1)",
                UserWarning,
                stacklevel=4,
            )
        return None
    from overdrive.parallel.chain import Chain
    from overdrive.strategies.pipeline import PipelineParallelStrategy, PPSettings

    layout = layout_from_settings(settings, state.num_processes)  # refuses what cannot run
    pp = PPSettings(
        degree=degree,
        micro_batches=pp_micro_batches(settings),
        schedule=str(settings["megatron_lm_config.pipeline_schedule"]),
        loss_fn=loss_fn,
        split_points=split_points,
        key=pp_key(settings),
        loss_fn_owner=owner,
        loss_fn_key=f"{prefix}_loss_fn",
    )
    tp = _tp_settings(settings, tp_plan, sequence_parallel)
    if tp is not None and tp.sequence_parallel:
        from overdrive.errors import ConfigError

        raise ConfigError(
            f"sequence parallelism ({tp.sp_key}, from {tp.sp_source}) cannot run inside "
            "pipeline stages yet",
            key=tp.sp_key,
            fix="turn sequence parallelism off, or drop the pipeline degree",
        )
    fsdp = None
    if settings["distributed_type"] == "FSDP":
        from overdrive.parallel.fsdp_policy import policy_from_settings

        fsdp = policy_from_settings(settings, fsdp_wrap)
    return PipelineParallelStrategy(state.device, layout, pp, Chain(tp=tp, fsdp=fsdp), rules=rules)
