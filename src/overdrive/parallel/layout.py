"""One parallel layout for every backend: the degree of each dimension, validated early.

Dimensions, outermost first: ``pp`` (pipeline), ``dp_replicate`` (replicas, as in DDP or
HSDP's outer dimension), ``dp_shard`` (FSDP shards), ``cp`` (context), ``tp`` (tensor).
Their product is the world size. Torch-free, so the launcher can refuse a world size that
does not factor before it starts a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError
from overdrive.parallel.cp_rules import cp_degree
from overdrive.parallel.degree_rules import refuse_not_dividing
from overdrive.parallel.mesh_shape import MESH_ORDER, mesh_shape
from overdrive.parallel.pipeline_rules import check_pipeline_settings

if TYPE_CHECKING:
    from overdrive.config.settings import Settings

# the mesh's order without ``sp`` (DeepSpeed's sequence parallelism, which is not a layout's)
DIMENSIONS = tuple(n for n in MESH_ORDER if n != "sp")
_DP = ("dp_replicate", "dp_shard")


@dataclass(frozen=True)
class ParallelLayout:
    """Degrees of each parallel dimension; their product is ``world_size``."""

    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp

    @property
    def dp_size(self) -> int:
        """Processes that see different data: replicas times shards."""
        return self.dp_replicate * self.dp_shard

    def degrees(self) -> dict[str, int]:
        """Every dimension's degree, outermost first."""
        return {name: getattr(self, name) for name in DIMENSIONS}

    def mesh_dims(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(names, sizes) of the mesh: every dimension above 1, and ``dp_shard`` always.

        ``dp_shard`` stays even at size 1 so replicate-only FSDP2 (NO_SHARD) is a 2-D
        ``(dp_replicate, dp_shard=1)`` mesh, as ``fully_shard`` expects for replication.
        """
        return mesh_shape(self.degrees(), keep=("dp_shard",))

    def coordinates(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` on every dimension (row-major, ``tp`` innermost)."""
        out: dict[str, int] = {}
        rest = rank
        for name in reversed(DIMENSIONS):
            degree = getattr(self, name)
            out[name] = rest % degree
            rest //= degree
        return {name: out[name] for name in DIMENSIONS}

    def dp_rank(self, rank: int) -> int:
        """The data-parallel rank of ``rank``: which slice of each global batch it reads."""
        c = self.coordinates(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    def data_ranks(self) -> list[int]:
        """One rank per data-parallel rank (the first of each tp/cp/pp group), in dp order."""
        firsts = [
            r
            for r in range(self.world_size)
            if all(v == 0 for n, v in self.coordinates(r).items() if n not in _DP)
        ]
        return sorted(firsts, key=self.dp_rank)

    def describe(self) -> str:
        """``dp_replicate=2 x dp_shard=2`` (dimensions above 1 only)."""
        parts = [f"{n}={d}" for n, d in self.degrees().items() if d > 1]
        return " x ".join(parts) or "one process"


def _hybrid_degrees(settings: Settings, world: int) -> tuple[int, int]:
    """(replicate, shard) for HYBRID_SHARD: an explicit size, else one group per machine."""
    replicate = settings["parallelism_config.parallelism_config_dp_replicate_size"]
    shard = settings["parallelism_config.parallelism_config_dp_shard_size"]
    machines = settings["num_machines"] or 1
    strategy_source = settings.source("fsdp_config.fsdp_sharding_strategy")
    if replicate is None and shard is None:
        if machines <= 1:
            raise ConfigError(
                f"fsdp_sharding_strategy HYBRID_SHARD ({strategy_source}) shards within a "
                "group and replicates across groups, but num_machines is 1 and no group size "
                "is set",
                key="fsdp_config.fsdp_sharding_strategy",
                fix="set parallelism_config.parallelism_config_dp_shard_size (processes per shard group, e.g. "
                f"{max(world // 2, 1)}), or run on several machines, or use FULL_SHARD",
            )
        replicate = machines
    if replicate is None:
        replicate = world // shard if shard and world % shard == 0 else 0
    if shard is None:
        shard = world // replicate if replicate and world % replicate == 0 else 0
    return replicate, shard


def _distributed_optimizer(settings: Settings) -> bool:
    """MEGATRON_LM's ``use_distributed_optimizer``: the data-parallel processes shard."""
    return requested_backend(settings) is DistributedType.MEGATRON_LM and bool(
        settings["megatron_lm_config.use_distributed_optimizer"]
    )


TP_KEYS = ("megatron_lm_config.tp_degree", "parallelism_config.parallelism_config_tp_size")


def tp_setting(settings: Settings) -> tuple[int, str]:
    """(tensor-parallel degree, the key that set it): ``megatron_lm_config.tp_degree`` under
    MEGATRON_LM, else ``parallelism_config.parallelism_config_tp_size``; 1 when neither."""
    megatron = requested_backend(settings) is DistributedType.MEGATRON_LM
    given = {
        key: settings[key]
        for key in TP_KEYS
        if settings.is_set(key) and (megatron or not key.startswith("megatron"))
    }
    if len(set(given.values())) > 1:
        named = " and ".join(f"{k} = {v} ({settings.source(k)})" for k, v in given.items())
        raise ConfigError(
            f"the tensor-parallel degree is given twice with different values: {named}",
            key=TP_KEYS[1],
            fix="set one of them (or the same value in both)",
        )
    for key, value in given.items():
        return int(value), key
    return 1, TP_KEYS[1]


def _tp_degree(settings: Settings, world: int) -> int:
    tp, key = tp_setting(settings)
    backend = requested_backend(settings)
    fsdp1 = backend is DistributedType.FSDP and settings["fsdp_config.fsdp_version"] == 1
    if tp > 1 and (backend is DistributedType.DEEPSPEED or fsdp1):
        what = (
            str(backend)
            if backend is DistributedType.DEEPSPEED
            else (f"FSDP with fsdp_version 1 ({settings.source('fsdp_config.fsdp_version')})")
        )
        raise ConfigError(
            f"tensor-parallel degree {tp} ({key}, from {settings.source(key)}) cannot run under "
            f"{what} ({settings.source('distributed_type')}): tensor parallelism composes with "
            "FSDP2 (fully_shard) and plain data parallelism only",
            key=key,
            fix="use distributed_type FSDP with fsdp_version 2 (--fsdp_version 2), or MEGATRON_LM / MULTI_CPU / "
            "MULTI_GPU, or drop the tensor-parallel degree",
        )
    refuse_not_dividing(tp, world, what="tensor-parallel", key=key, source=settings.source(key))
    return tp


PP_KEY = "megatron_lm_config.pp_degree"
PP_SIZE_KEY = "parallelism_config.parallelism_config_pp_size"
MICRO_BATCHES_KEY = "megatron_lm_config.num_micro_batches"


def pp_key(settings: Settings) -> str:
    """The key that sets the pipeline degree here: ``megatron_lm_config.pp_degree`` under
    MEGATRON_LM, else ``parallelism_config.parallelism_config_pp_size``."""
    return PP_KEY if requested_backend(settings) is DistributedType.MEGATRON_LM else PP_SIZE_KEY


def pp_setting(settings: Settings) -> int:
    """The pipeline-parallel degree (1 when the key of ``pp_key`` is not set)."""
    key = pp_key(settings)
    if not settings.is_set(key):
        return 1
    return int(settings[key] or 1)


def pp_micro_batches(settings: Settings, degree: int | None = None) -> int:
    """Micro-batches per pipelined batch: ``megatron_lm_config.num_micro_batches``, or as
    many as stages (``degree``, read from the settings when not given) when a
    ``parallelism_config`` pipeline leaves it unset."""
    if pp_key(settings) == PP_SIZE_KEY and not settings.is_set(MICRO_BATCHES_KEY):
        return pp_setting(settings) if degree is None else degree
    return int(settings[MICRO_BATCHES_KEY] or 1)


def _pp_degree(settings: Settings, world: int, tp: int) -> int:
    pp = pp_setting(settings)
    key = pp_key(settings)
    source = settings.source(key)
    micro = pp_micro_batches(settings, pp)
    if pp == 1 and settings.is_set(MICRO_BATCHES_KEY) and micro not in (None, 0, 1):
        raise ConfigError(
            f"{MICRO_BATCHES_KEY} = {micro} ({settings.source(MICRO_BATCHES_KEY)}) splits a "
            "pipeline's batch, but there is no pipeline (pp_degree is 1)",
            key=MICRO_BATCHES_KEY,
            fix=f"set {key} above 1, or remove {MICRO_BATCHES_KEY} (use "
            "gradient_accumulation_steps to split a batch without a pipeline)",
        )
    check_pipeline_settings(settings, pp, key)
    schedule_key = "megatron_lm_config.pipeline_schedule"
    if pp > 1 and settings[schedule_key] == "1F1B" and micro < pp:
        raise ConfigError(
            f"the 1F1B pipeline schedule ({schedule_key}, from {settings.source(schedule_key)}) "
            f"needs at least as many micro-batches as stages: {MICRO_BATCHES_KEY} is "
            f"{micro} ({settings.source(MICRO_BATCHES_KEY)}), {key} is {pp} ({source})",
            key=MICRO_BATCHES_KEY,
            fix=f"set {MICRO_BATCHES_KEY} to {pp} or more (more micro-batches keep the stages "
            f"busier), or {schedule_key} to GPipe",
        )
    if world % (pp * tp):
        fits = [d for d in range(2, pp + 1) if world % (d * tp) == 0]
        raise ConfigError(
            f"pipeline-parallel degree {pp} ({key}, from {source}) does not divide the "
            f"{world} processes of this launch",
            key=key,
            fix=f"launch a multiple of {pp} processes (e.g. {pp * -(-world // pp)}), or set "
            f"{key} to a divisor of {world}" + (f" (e.g. {fits[-1]})" if fits else ""),
        )
    return pp


def layout_from_settings(settings: Settings, world: int) -> ParallelLayout:
    """The layout the settings ask for on ``world`` processes; an error if it cannot factor.

    The pipeline, tensor- and context-parallel degrees take their processes first; the
    data-parallel degree is what is left (FSDP shards over it, other backends replicate).
    """
    tp = _tp_degree(settings, world)
    pp = _pp_degree(settings, world, tp)
    others = {"tensor-parallel": (tp, tp_setting(settings)[1]), "pipeline": (pp, pp_key(settings))}
    cp = cp_degree(settings, world, others)
    dp_world = world // (tp * pp * cp)
    fsdp = requested_backend(settings) is DistributedType.FSDP
    hybrid = fsdp and settings["fsdp_config.fsdp_sharding_strategy"] in (
        "HYBRID_SHARD",
        "HYBRID_SHARD_ZERO2",
    )
    if hybrid:
        replicate, shard = _hybrid_degrees(settings, dp_world)
    elif fsdp and settings["fsdp_config.fsdp_sharding_strategy"] == "NO_SHARD":
        replicate, shard = dp_world, 1
    elif fsdp or _distributed_optimizer(settings):
        replicate, shard = 1, dp_world
    else:
        replicate, shard = dp_world, 1
    layout = ParallelLayout(dp_replicate=replicate, dp_shard=shard, tp=tp, pp=pp, cp=cp)
    if replicate < 1 or shard < 1 or layout.world_size != world:
        sizes = (
            f"dp_replicate_size={settings['parallelism_config.parallelism_config_dp_replicate_size']} "
            f"({settings.source('parallelism_config.parallelism_config_dp_replicate_size')}), dp_shard_size="
            f"{settings['parallelism_config.parallelism_config_dp_shard_size']} "
            f"({settings.source('parallelism_config.parallelism_config_dp_shard_size')})"
        )
        if tp > 1:
            sizes += f", tp={tp}"
        raise ConfigError(
            f"the parallel layout does not fit {world} processes: {sizes}",
            key="parallelism_config.parallelism_config_dp_shard_size",
            fix=f"choose sizes whose product is {world}, or launch that product of processes",
        )
    return layout
