"""Which strategy class runs, from a table: the process's ``Decision`` (made once, with its
``PartialState``) gives the kind, which picks a builder that hands the strategy the
``Topology``.

Kinds: ``pipeline`` (a pipeline degree above 1), ``deepspeed`` (its engine), ``mesh`` (the
DTensor mesh strategy: FSDP1/2, HSDP, tensor parallelism, Megatron-LM's distributed
optimizer), ``ddp`` (replicas on several processes), ``single`` (one process).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError
from overdrive.parallel.chain import Chain
from overdrive.parallel.context_parallel import ContextParallelStep
from overdrive.parallel.cp_rules import CP_KEY
from overdrive.parallel.fsdp_policy import policy_from_settings
from overdrive.strategies.ddp import DDPStrategy
from overdrive.strategies.options import StrategyOptions
from overdrive.strategies.single import SingleDeviceStrategy

if TYPE_CHECKING:
    import torch

    from overdrive.config.settings import Settings
    from overdrive.parallel.decide import Decision
    from overdrive.parallel.fsdp_policy import FSDPPolicy
    from overdrive.parallel.topology import Topology
    from overdrive.parallel.tp_settings import TPSettings
    from overdrive.strategies.base import Strategy
    from overdrive.strategies.pipeline import PPSettings
    from overdrive.strategies.rules import LoopRules


@dataclass(frozen=True)
class Choice:
    """Everything a builder reads: decided once, before any strategy exists."""

    device: torch.device
    settings: Settings
    decision: Decision
    topology: Topology
    options: StrategyOptions
    tp: TPSettings | None
    pp: PPSettings | None
    rules: LoopRules


def kind(choice: Choice) -> str:
    """The row of ``BUILDERS`` for ``choice``."""
    decision = choice.decision
    if choice.pp is not None:
        return "pipeline"
    if decision.backend is DistributedType.DEEPSPEED:
        return "deepspeed"
    # dp_shard above 1 outside FSDP: MEGATRON_LM's use_distributed_optimizer
    layout = decision.layout
    if choice.tp is not None or decision.chain.fsdp or layout.dp_shard > 1:
        return "mesh"
    return "ddp" if layout.world_size > 1 else "single"


def _pipeline(c: Choice) -> Strategy:
    """Each stage runs the parallelize chain: tensor parallelism when a tp degree is set, then
    FSDP2 under distributed_type FSDP (else the stage's replicas average their gradients)."""
    # deferred: torch.distributed.pipelining (about 150 ms), heavy, needed only here
    from overdrive.strategies.pipeline import PipelineParallelStrategy

    assert c.pp is not None
    if c.tp is not None and c.tp.sequence_parallel:
        raise ConfigError(
            f"sequence parallelism ({c.tp.sp_key}, from {c.tp.sp_source}) cannot run inside "
            "pipeline stages yet",
            key=c.tp.sp_key,
            fix="turn sequence parallelism off, or drop the pipeline degree",
        )
    fsdp = _fsdp_policy(c) if c.decision.chain.fsdp else None
    chain = Chain(tp=c.tp, recompute=c.rules.recompute, fsdp=fsdp)
    return PipelineParallelStrategy(c.device, c.topology, c.pp, chain, rules=c.rules)


def _deepspeed(c: Choice) -> Strategy:
    """DeepSpeed's engine, its config from the settings and any given in code; its topology is
    replicas (the engine groups the processes itself)."""
    # The DeepSpeed backend is optional: its glue and checkpoint code load when asked for.
    from overdrive.ds.config import build  # deferred: optional DeepSpeed backend
    from overdrive.strategies.deepspeed import DeepSpeedStrategy  # deferred: same, ~150 ms

    given = c.options.ds_config
    # transformers' TrainingArguments(deepspeed=...) passes its HfTrainerDeepSpeedConfig:
    # the JSON with Trainer's "auto"s filled; Trainer accumulates by itself.
    from_transformers = type(given).__module__.startswith("transformers.")
    if isinstance(getattr(given, "config", None), dict):  # an HfDeepSpeedConfig
        given = getattr(given, "config", None)
    label = {"code_label": "TrainingArguments(deepspeed=...)"} if from_transformers else {}
    code = given if isinstance(given, dict) else None
    config = build(c.settings, code_config=code, caller_accumulates=from_transformers, **label)
    zero3_init = bool(c.settings["deepspeed_config.zero3_init_flag"])
    return DeepSpeedStrategy(
        c.device, config, zero3_init=zero3_init, topology=c.topology, rules=c.rules
    )


def _fsdp_policy(c: Choice) -> FSDPPolicy:
    return policy_from_settings(c.settings, c.options.fsdp_wrap)


def _mesh(c: Choice) -> Strategy:
    """The mesh strategy: FSDP's policy under FSDP, else Megatron-LM's distributed optimizer
    (the data-parallel processes shard), else plain replication around tensor parallelism."""
    # torch.distributed.fsdp and tensor parallelism (about 85 ms), for the mesh strategy only.
    from overdrive.strategies.fsdp import FSDPStrategy  # deferred: heavy, mesh runs only
    from overdrive.strategies.tensor_parallel import (  # deferred: heavy, mesh runs only
        distributed_optimizer_policy,
        replicate_policy,
    )

    if c.decision.chain.fsdp:
        policy = _fsdp_policy(c)
    elif c.topology.layout.dp_shard > 1:
        policy = distributed_optimizer_policy()
    else:
        policy = replicate_policy()
    cp = c.topology.layout.cp
    step = ContextParallelStep(cp, str(c.settings.source(CP_KEY))) if cp > 1 else None
    return FSDPStrategy(c.device, c.topology, policy, c.tp, cp=step, rules=c.rules)


def _ddp(c: Choice) -> Strategy:
    return DDPStrategy(c.device, c.options.ddp_kwargs, c.topology, rules=c.rules)


def _single(c: Choice) -> Strategy:
    return SingleDeviceStrategy(c.device, c.topology, rules=c.rules)


BUILDERS: dict[str, Callable[[Choice], Strategy]] = {
    "pipeline": _pipeline,
    "deepspeed": _deepspeed,
    "mesh": _mesh,
    "ddp": _ddp,
    "single": _single,
}
