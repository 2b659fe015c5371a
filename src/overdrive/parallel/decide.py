"""Where a process decides how it runs: one frozen ``Decision`` from the settings and world.

The launcher asks once, when it plans (``launch/plan.py``: its ``LaunchPlan`` carries the
decision to the other checks, the dry run and the simulation); a worker asks once, when its
``PartialState`` is made, and every reader takes that object: the state's
``distributed_type``, the strategy table (``strategies/choice.py``), the chain's settings,
the precision policy's owner and ``Accelerator.parallelism_config``. Both refuse a layout
alike. Torch-free: the backend is a ``DistributedType`` member, never its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.parallel.layout import ParallelLayout, layout_from_settings

if TYPE_CHECKING:
    from overdrive.config.settings import Settings

_REPLICAS = (DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
_RAM_EFFICIENT_KEY = "fsdp_config.fsdp_cpu_ram_efficient_loading"


@dataclass(frozen=True)
class ChainDecision:
    """What the settings decide about the parallelize chain, before any strategy exists.

    ``fsdp``: the wrap step is FSDP (``fsdp_version`` 1 or 2); ``fill_from_main``: FSDP's
    ``cpu_ram_efficient_loading`` (processes other than the main one build the model empty
    and the chain fills it from the main one); ``sequence_parallel``: Megatron-LM's
    ``sequence_parallelism`` asked for in the settings (code can ask too, in
    ``StrategyOptions``); ``megatron``: Megatron-LM's plugin owns the pipeline's settings.
    """

    fsdp: bool = False
    fsdp_version: int | None = None
    fill_from_main: bool = False
    sequence_parallel: bool = False
    megatron: bool = False

    @property
    def fsdp2(self) -> bool:
        return self.fsdp and self.fsdp_version == 2


@dataclass(frozen=True)
class Decision:
    """How this run executes on ``layout.world_size`` processes: decided once, read only.

    ``backend``: the running backend (automatic settings resolved: one process is ``NO``,
    several are ``MULTI_GPU`` on CUDA, else ``MULTI_CPU``); ``precision_owner``: the engine
    that runs mixed precision itself (DeepSpeed), None when overdrive's precision policy does.
    """

    layout: ParallelLayout
    backend: DistributedType
    chain: ChainDecision
    precision_owner: str | None = None


def resolve_backend(
    requested: DistributedType | None, world: int, *, cuda: bool
) -> DistributedType:
    """The backend that runs: ``requested``, or chosen from the world and device when unset;
    MULTI_CPU / MULTI_GPU on one process are ``NO`` (nothing to replicate)."""
    if requested is None:
        if world == 1:
            return DistributedType.NO
        return DistributedType.MULTI_GPU if cuda else DistributedType.MULTI_CPU
    if requested in _REPLICAS and world == 1:
        return DistributedType.NO
    return requested


def chain_decision(settings: Settings, backend: DistributedType | None) -> ChainDecision:
    """The chain's settings under ``backend`` (the one the settings ask for)."""
    fsdp = backend is DistributedType.FSDP
    megatron = backend is DistributedType.MEGATRON_LM
    version = settings["fsdp_config.fsdp_version"] if fsdp else None
    return ChainDecision(
        fsdp=fsdp,
        fsdp_version=None if version is None else int(version),
        fill_from_main=fsdp and bool(settings[_RAM_EFFICIENT_KEY]),
        sequence_parallel=megatron and settings["megatron_lm_config.sequence_parallelism"] is True,
        megatron=megatron,
    )


def decide_layout(settings: Settings, world: int, *, cuda: bool = False) -> Decision:
    """The decision of this run on ``world`` processes (``cuda``: they run on GPUs); an
    error if its layout cannot factor."""
    requested = requested_backend(settings)
    backend = resolve_backend(requested, world, cuda=cuda)
    return Decision(
        layout=layout_from_settings(settings, world),
        backend=backend,
        chain=chain_decision(settings, requested),
        precision_owner="DeepSpeed" if backend is DistributedType.DEEPSPEED else None,
    )
