"""The parallelize chain: plain ``apply_*`` functions run in a fixed order on one model, or on
one pipeline stage of it, as torchtitan's ``parallelize`` runs them.

    tensor parallelism (apply_tp)      split the plan's modules over the ``tp`` mesh dimension
      -> fill from the main process    processes that built the model empty get its weights
      -> activation checkpointing      recompute each unit's activations in backward
      -> FSDP2 (apply_fsdp2)           shard over the data-parallel sub-mesh
         or FSDP1 (apply_fsdp1)        wrap the units and the root (fsdp_version: 1)
         or replicate_leftovers        without FSDP: what tensor parallelism left whole
                                       becomes a replicated DTensor on the ``tp`` mesh
      -> torch.compile                 the whole wrapped model (dynamo_config), as Hugging
                                       Face Accelerate compiles it

Each step owns its settings (``TPSettings``, ``FSDPPolicy``, ``CompileStep``); a step
without them is skipped. The FSDP strategy runs it on the whole model (FSDP1 or FSDP2, with
tensor parallelism when a plan is given); the pipeline strategy on its stage after
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
from overdrive.parallel.activation_checkpointing import apply_activation_checkpointing
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
    """The steps to run: tensor parallelism when ``tp`` is given; ``fsdp``'s units checkpoint
    their activations when it asks, and are sharded with its FSDP version when ``shard``
    (else what tensor parallelism left whole is replicated on the ``tp`` mesh); the result is
    compiled when ``compile`` is given."""

    tp: TPSettings | None = None
    fsdp: FSDPPolicy | None = None
    shard: bool = True
    compile: CompileStep | None = None


class Parallelized(NamedTuple):
    """What the chain did: the module to call (``runs`` itself, or the FSDP1 or compile
    wrapper around it), the tensor-parallel plan applied, the module paths of its units."""

    module: nn.Module
    plan: dict[str, str]
    units: list[str]


def parallelize(
    runs: nn.Module,
    owner: nn.Module,
    mesh: DeviceMesh,
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
    tensor-parallel plan; the same module for a whole model). ``whole=False``: ``runs`` is a
    pipeline stage, holding only some of the plan's modules. ``split_locally``: every
    process already holds the same weights (or none), so tensor parallelism cuts its part
    locally; otherwise the first process of each tp group scatters its own. ``fill``: run
    between the split and sharding, on processes that built the model empty
    (``fill_from_main``). FSDP1 places its units on ``device``; ``fsdp1_init`` fills each
    unit of an empty model as FSDP1 shards it.
    """
    plan: dict[str, str] = {}
    if chain.tp is not None:
        plan = apply_tp(owner, mesh["tp"], chain.tp, split_locally=split_locally, whole=whole)
    if fill is not None:
        fill(runs)
    units = policy_units(runs, chain.fsdp) if chain.fsdp is not None else []
    paths = {id(m): name for name, m in runs.named_modules()}
    unit_paths = sorted(paths[id(u)] for u in units)
    if chain.fsdp is not None and chain.fsdp.activation_checkpointing:
        apply_activation_checkpointing(units or [runs])
    module = runs
    if chain.fsdp is not None and chain.shard and chain.fsdp.version == 1:
        hybrid = chain.fsdp.sharding_strategy.startswith("HYBRID")
        dp_mesh = data_parallel_mesh(mesh, flat=not hybrid)
        assert device is not None, "FSDP1 places its units on a device"
        module = apply_fsdp1(runs, dp_mesh, chain.fsdp, units, device, param_init_fn=fsdp1_init)
    elif chain.fsdp is not None and chain.shard:
        apply_fsdp2(runs, data_parallel_mesh(mesh), chain.fsdp, units)
    elif chain.tp is not None:
        replicate_leftovers(runs, mesh["tp"])
    if chain.compile is not None:
        module = chain.compile.apply(module)
    return Parallelized(module, plan, unit_paths)
