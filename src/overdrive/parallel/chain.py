"""The parallelize chain: plain ``apply_*`` functions run in a fixed order on one model, or on
one pipeline stage of it, as torchtitan's ``parallelize`` runs them.

    tensor parallelism (apply_tp)      split the plan's modules over the ``tp`` mesh dimension
      -> activation checkpointing      recompute each unit's activations in backward
      -> FSDP2 (apply_fsdp2)           shard over the data-parallel sub-mesh
         or replicate_leftovers        without FSDP: what tensor parallelism left whole
                                       becomes a replicated DTensor on the ``tp`` mesh

Each step owns its settings (``TPSettings``, ``FSDPPolicy``); a step without them is skipped.
The pipeline strategy runs the chain on its stage after splitting the model
(``parallel/pipeline.py``), so pipeline x tensor x data parallelism compose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

from overdrive.parallel.activation_checkpointing import apply_activation_checkpointing
from overdrive.parallel.fsdp_policy import FSDPPolicy
from overdrive.parallel.mesh import data_parallel_mesh
from overdrive.parallel.tp import TPSettings, apply_tp
from overdrive.parallel.tp_replicate import replicate_leftovers
from overdrive.parallel.wrap import policy_units

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True)
class Chain:
    """The steps to run: tensor parallelism when ``tp`` is given, FSDP2 when ``fsdp`` is."""

    tp: TPSettings | None = None
    fsdp: FSDPPolicy | None = None


def parallelize(
    runs: nn.Module, owner: nn.Module, mesh: DeviceMesh, chain: Chain, *, whole: bool = True
) -> dict[str, str]:
    """Run ``chain`` on ``runs`` (the module that is called) in place; returns the tensor
    parallel plan applied. ``owner`` is the model whose modules ``runs`` holds (it carries
    the config and its own tensor-parallel plan; the same module for a whole model).
    ``whole=False``: ``runs`` is a pipeline stage, holding only some of the plan's modules.
    Every process already holds the same weights (tensor parallelism cuts its part locally).
    """
    plan: dict[str, str] = {}
    if chain.tp is not None:
        plan = apply_tp(owner, mesh["tp"], chain.tp, split_locally=True, whole=whole)
    if chain.fsdp is not None:
        from overdrive.parallel.fsdp2 import apply_fsdp2

        units = policy_units(runs, chain.fsdp)
        if chain.fsdp.activation_checkpointing:
            apply_activation_checkpointing(units or [runs])
        apply_fsdp2(runs, data_parallel_mesh(mesh), chain.fsdp, units)
    elif chain.tp is not None:
        replicate_leftovers(runs, mesh["tp"])
    return plan
