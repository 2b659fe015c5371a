"""The parallelize chain: the only way a model is wrapped. Plain steps run in a fixed order on
one model, as torchtitan's ``parallelize`` runs them:

    broadcast from main (BroadcastFromMain) every process gets the main process's weights
      -> pipeline split (PipelineSplit)  this process keeps its stage; the rest run on it
      -> placement (Placement)           the module moves to the device
      -> tensor parallelism (apply_tp)   split the plan's modules over the ``tp`` mesh dimension
      -> context parallelism             attention readied for ring attention (``cp`` dimension)
      -> activation checkpointing        FSDP's units, or Megatron-LM's repeated layers,
                                         recompute their activations in backward
      -> regional torch.compile          each repeated block compiled in place
      -> wrap: FSDP2 (apply_fsdp2)       shard over the data-parallel sub-mesh
         or FSDP1 (apply_fsdp1)          wrap the units and the root (fsdp_version: 1)
         or replicate_leftovers          without FSDP: what tensor parallelism left whole
                                         becomes a replicated DTensor on the ``tp`` mesh
         or DDP (DDPStep)                a whole replica per process, gradients averaged
         or nothing                      one process
      -> fill from main (FillFromMain)   processes that built the model empty get their part
                                         of the main process's weights (FSDP1: unit by unit
                                         inside its wrap step)
      -> torch.compile                   the whole wrapped model (dynamo_config), as Hugging
                                         Face Accelerate compiles it

Each step owns its settings (``BroadcastFromMain``, ``PipelineSplit``, ``Placement``,
``TPSettings``, ``ContextParallelStep``, ``RecomputeLayers``, ``FSDPPolicy``, ``DDPStep``,
``FillFromMain``, ``CompileStep``) as a field of ``Chain``; a step without them is skipped.
The mesh strategy runs it with FSDP1 or FSDP2 (and tensor or context parallelism), DDP and
one device with their own wrap step, the pipeline strategy with its split, so pipeline x
tensor x data parallelism compose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from overdrive.compile.model import CompileStep
from overdrive.parallel.activation_checkpointing import (
    RecomputeLayers,
    apply_activation_checkpointing,
    train_without_kv_cache,
)
from overdrive.parallel.context_parallel import ContextParallelStep
from overdrive.parallel.ddp_step import DDPStep
from overdrive.parallel.fill_from_main import BroadcastFromMain, FillFromMain
from overdrive.parallel.fsdp1 import apply_fsdp1
from overdrive.parallel.fsdp2 import apply_fsdp2
from overdrive.parallel.fsdp_policy import FSDPPolicy
from overdrive.parallel.mesh import data_parallel_mesh
from overdrive.parallel.pipeline import PipelineSplit, Stage
from overdrive.parallel.placement import Placement
from overdrive.parallel.rebind import named_params, replacement_map
from overdrive.parallel.tp import apply_tp
from overdrive.parallel.tp_replicate import replicate_leftovers
from overdrive.parallel.tp_settings import TPSettings
from overdrive.parallel.wrap import policy_units

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


# The wrap step, called as wrap(module, units=...): returns the module to call.
Wrap = Callable[..., nn.Module]


@dataclass(frozen=True)
class Chain:
    """The steps to run: the main process's weights to every process (``broadcast``); this
    process's pipeline stage (``split``); the move to a device (``place``); tensor
    parallelism when ``tp`` is given; attention readied for context parallelism when ``cp``
    is; activation checkpointing of ``recompute``'s layers, or of ``fsdp``'s units when it
    asks; then the wrap step: ``fsdp``'s version when ``shard`` (else what tensor
    parallelism left whole is replicated on the ``tp`` mesh), or ``ddp``; empty parts filled
    from the main process (``fill``); ``compile`` in place per block before the wrap step
    when regional, else around the wrapped model. ``device``: where FSDP1 puts its units."""

    broadcast: BroadcastFromMain | None = None
    split: PipelineSplit | None = None
    place: Placement | None = None
    tp: TPSettings | None = None
    cp: ContextParallelStep | None = None
    recompute: RecomputeLayers | None = None
    fsdp: FSDPPolicy | None = None
    shard: bool = True
    ddp: DDPStep | None = None
    fill: FillFromMain | None = None
    compile: CompileStep | None = None
    device: torch.device | None = None

    def needs_mesh(self) -> bool:
        """Whether a step runs on the device mesh (tensor, context or fully sharded)."""
        return self.tp is not None or self.cp is not None or self.fsdp is not None


class Parallelized(NamedTuple):
    """What the chain did: the module to call (the module run, or the FSDP1 or compile
    wrapper around it), the tensor-parallel plan applied, the module paths of its units, the
    parameters it replaced (id of the old one -> the new one) and, under a pipeline, this
    process's stage (whose module is the one run)."""

    module: nn.Module
    plan: dict[str, str]
    units: list[str]
    replaced: dict[int, nn.Parameter]
    stage: Stage | None = None


def parallelize(model: nn.Module, mesh: DeviceMesh | None, chain: Chain) -> Parallelized:
    """Run ``chain`` on ``model`` in place (on its pipeline stage after the split step).

    ``mesh``: the device mesh, None for a chain with no step that needs one. Tensor
    parallelism splits locally when every process holds the main process's weights already
    (broadcast) or none yet (filled later); otherwise the first process of each tp group
    scatters its own.
    """
    assert mesh is not None or not chain.needs_mesh(), "tensor, context and FSDP steps need a mesh"
    if chain.broadcast is not None:
        chain.broadcast.apply(model)
    stage = chain.split.apply(model) if chain.split is not None else None
    runs = model if stage is None else stage.module
    before = named_params(runs)
    if chain.place is not None:
        chain.place.apply(runs)
    plan: dict[str, str] = {}
    if chain.tp is not None:
        assert mesh is not None
        local = chain.broadcast is not None or chain.fill is not None
        plan = apply_tp(model, mesh["tp"], chain.tp, split_locally=local, whole=stage is None)
    if chain.cp is not None:
        chain.cp.apply(model)
    units = policy_units(runs, chain.fsdp) if chain.fsdp is not None else []
    paths = {id(m): name for name, m in runs.named_modules()}
    unit_paths = sorted(paths[id(u)] for u in units)
    wrap = _wrap_step(runs, mesh, chain)  # FSDP1's filler sees the modules' own paths
    recomputed = _recomputed(runs, model, chain, units)
    apply_activation_checkpointing(recomputed)
    if recomputed and stage is None:
        train_without_kv_cache(model)
    if chain.compile is not None and chain.compile.regional:
        chain.compile.apply_regions(runs)
    module = wrap(runs, units=units)
    if chain.fill is not None and not chain.fill.per_unit:
        chain.fill.apply(module)
    replaced = replacement_map(before, named_params(module))
    if chain.compile is not None and not chain.compile.regional:
        module = chain.compile.apply(module)
    return Parallelized(module, plan, unit_paths, replaced, stage)


def _recomputed(
    runs: nn.Module, owner: nn.Module, chain: Chain, units: list[nn.Module]
) -> list[nn.Module]:
    """The modules whose activations are recomputed: Megatron-LM's repeated layers of the
    model (those ``runs`` holds, for a pipeline stage), else FSDP's units (or the whole
    module without any) when its policy asks."""
    if chain.recompute is not None:
        held = {id(m) for m in runs.modules()}
        return [m for m in chain.recompute.units(owner) if id(m) in held]
    if chain.fsdp is not None and chain.fsdp.activation_checkpointing:
        return units or [runs]
    return []


def _wrap_step(runs: nn.Module, mesh: DeviceMesh | None, chain: Chain) -> Wrap:
    """The wrap step: FSDP1, FSDP2, replication of tensor parallelism's leftovers, DDP, or
    none. FSDP1 fills an empty ``runs`` unit by unit from the main process as it wraps."""
    if chain.fsdp is not None and chain.shard:
        assert mesh is not None
        if chain.fsdp.version == 1:
            hybrid = chain.fsdp.sharding_strategy.startswith("HYBRID")
            dp_mesh = data_parallel_mesh(mesh, flat=not hybrid)
            assert chain.device is not None, "FSDP1 places its units on a device"
            fill = chain.fill
            init = fill.unit_filler(runs) if fill is not None and fill.per_unit else None
            return partial(
                apply_fsdp1,
                mesh=dp_mesh,
                policy=chain.fsdp,
                device=chain.device,
                param_init_fn=init,
            )
        return partial(apply_fsdp2, mesh=data_parallel_mesh(mesh), policy=chain.fsdp)
    if chain.tp is not None:
        assert mesh is not None
        return partial(_replicate, tp_mesh=mesh["tp"])
    if chain.ddp is not None:
        return partial(_ddp, step=chain.ddp)
    return _unwrapped


def _replicate(module: nn.Module, *, units: list[nn.Module], tp_mesh: DeviceMesh) -> nn.Module:
    replicate_leftovers(module, tp_mesh)
    return module


def _ddp(module: nn.Module, *, units: list[nn.Module], step: DDPStep) -> nn.Module:
    return step.apply(module)


def _unwrapped(module: nn.Module, *, units: list[nn.Module]) -> nn.Module:
    return module
