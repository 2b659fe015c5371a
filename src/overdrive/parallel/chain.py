"""The parallelize chain: the only way a model is wrapped. Plain ``apply_*`` steps run in a
fixed order on one model, or on one pipeline stage of it, as torchtitan's ``parallelize``
runs them:

    tensor parallelism (apply_tp)      split the plan's modules over the ``tp`` mesh dimension
      -> fill from the main process    processes that built the model empty get its weights
      -> context parallelism           attention readied for ring attention (``cp`` dimension)
      -> activation checkpointing      FSDP's units, or Megatron-LM's repeated layers,
                                       recompute their activations in backward
      -> regional torch.compile        each repeated block compiled in place
      -> wrap: FSDP2 (apply_fsdp2)     shard over the data-parallel sub-mesh
         or FSDP1 (apply_fsdp1)        wrap the units and the root (fsdp_version: 1)
         or replicate_leftovers        without FSDP: what tensor parallelism left whole
                                       becomes a replicated DTensor on the ``tp`` mesh
         or DDP (DDPStep)              a whole replica per process, gradients averaged
         or nothing                    one process
      -> torch.compile                 the whole wrapped model (dynamo_config), as Hugging
                                       Face Accelerate compiles it

Each step owns its settings (``TPSettings``, ``ContextParallelStep``, ``RecomputeLayers``,
``FSDPPolicy``, ``DDPStep``, ``CompileStep``); a step without them is skipped. The mesh
strategy runs it on the whole model (FSDP1 or FSDP2, with tensor or context parallelism);
DDP and one device with their own wrap step; the pipeline strategy on its stage after
splitting the model (``parallel/pipeline.py``), so pipeline x tensor x data parallelism
compose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from overdrive.compile import CompileStep
from overdrive.parallel.activation_checkpointing import (
    RecomputeLayers,
    apply_activation_checkpointing,
)
from overdrive.parallel.context_parallel import ContextParallelStep
from overdrive.parallel.ddp_step import DDPStep
from overdrive.parallel.fsdp1 import apply_fsdp1
from overdrive.parallel.fsdp2 import apply_fsdp2
from overdrive.parallel.fsdp_policy import FSDPPolicy
from overdrive.parallel.mesh import data_parallel_mesh
from overdrive.parallel.tp import apply_tp
from overdrive.parallel.tp_replicate import replicate_leftovers
from overdrive.parallel.tp_settings import TPSettings
from overdrive.parallel.wrap import policy_units

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True)
class Chain:
    """The steps to run: tensor parallelism when ``tp`` is given; attention readied for
    context parallelism when ``cp`` is; activation checkpointing of ``recompute``'s layers,
    or of ``fsdp``'s units when it asks; then the wrap step: ``fsdp``'s version when
    ``shard`` (else what tensor parallelism left whole is replicated on the ``tp`` mesh), or
    ``ddp``; ``compile`` in place per block before the wrap step when regional, else around
    the wrapped model."""

    tp: TPSettings | None = None
    cp: ContextParallelStep | None = None
    recompute: RecomputeLayers | None = None
    fsdp: FSDPPolicy | None = None
    shard: bool = True
    ddp: DDPStep | None = None
    compile: CompileStep | None = None

    def needs_mesh(self) -> bool:
        """Whether a step runs on the device mesh (tensor, context or fully sharded)."""
        return self.tp is not None or self.cp is not None or self.fsdp is not None


class Parallelized(NamedTuple):
    """What the chain did: the module to call (``runs`` itself, or the FSDP1 or compile
    wrapper around it), the tensor-parallel plan applied, the module paths of its units."""

    module: nn.Module
    plan: dict[str, str]
    units: list[str]


def parallelize(
    runs: nn.Module,
    owner: nn.Module,
    mesh: DeviceMesh | None,
    chain: Chain,
    *,
    whole: bool = True,
    split_locally: bool = True,
    fill: Callable[[nn.Module], None] | None = None,
    device: torch.device | None = None,
    fsdp1_init: Callable[[nn.Module], None] | None = None,
) -> Parallelized:
    """Run ``chain`` on ``runs`` (the module that is called) in place.

    ``owner`` is the model whose modules ``runs`` holds (it carries the config and its own
    tensor-parallel plan; the same module for a whole model). ``mesh``: the device mesh, None
    for a chain with no step that needs one. ``whole=False``: ``runs`` is a pipeline stage,
    holding only some of the plan's modules. ``split_locally``: every process already holds
    the same weights (or none), so tensor parallelism cuts its part locally; otherwise the
    first process of each tp group scatters its own. ``fill``: run between the split and
    sharding, on processes that built the model empty (``fill_from_main``). FSDP1 places its
    units on ``device``; ``fsdp1_init`` fills each unit of an empty model as FSDP1 shards it.
    """
    assert mesh is not None or not chain.needs_mesh(), "tensor, context and FSDP steps need a mesh"
    plan: dict[str, str] = {}
    if chain.tp is not None:
        assert mesh is not None
        plan = apply_tp(owner, mesh["tp"], chain.tp, split_locally=split_locally, whole=whole)
    if fill is not None:
        fill(runs)
    if chain.cp is not None:
        chain.cp.apply(owner)
    units = policy_units(runs, chain.fsdp) if chain.fsdp is not None else []
    paths = {id(m): name for name, m in runs.named_modules()}
    unit_paths = sorted(paths[id(u)] for u in units)
    apply_activation_checkpointing(_recomputed(runs, owner, chain, units))
    if chain.compile is not None and chain.compile.regional:
        chain.compile.apply_regions(runs)
    module = _wrap(runs, mesh, chain, units, device, fsdp1_init)
    if chain.compile is not None and not chain.compile.regional:
        module = chain.compile.apply(module)
    return Parallelized(module, plan, unit_paths)


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


def _wrap(
    runs: nn.Module,
    mesh: DeviceMesh | None,
    chain: Chain,
    units: list[nn.Module],
    device: torch.device | None,
    fsdp1_init: Callable[[nn.Module], None] | None,
) -> nn.Module:
    """The wrap step: FSDP1, FSDP2, replication of tensor parallelism's leftovers, DDP, or
    none; returns the module to call."""
    if chain.fsdp is not None and chain.shard:
        assert mesh is not None
        if chain.fsdp.version == 1:
            hybrid = chain.fsdp.sharding_strategy.startswith("HYBRID")
            dp_mesh = data_parallel_mesh(mesh, flat=not hybrid)
            assert device is not None, "FSDP1 places its units on a device"
            return apply_fsdp1(runs, dp_mesh, chain.fsdp, units, device, param_init_fn=fsdp1_init)
        apply_fsdp2(runs, data_parallel_mesh(mesh), chain.fsdp, units)
        return runs
    if chain.tp is not None:
        assert mesh is not None
        replicate_leftovers(runs, mesh["tp"])
        return runs
    if chain.ddp is not None:
        return chain.ddp.apply(runs)
    return runs
