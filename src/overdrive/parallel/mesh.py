"""A layout becomes one ``DeviceMesh`` in the worker, its dimensions named as in the layout.

``init_mesh`` is the one place a mesh is made from degrees: a strategy's ``Topology`` and
``ParallelismConfig.build_device_mesh`` both build theirs through it (``mesh_shape``'s order).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.mesh_shape import mesh_shape

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def init_mesh(
    device_type: str, degrees: Mapping[str, int], *, keep: Collection[str] = ()
) -> DeviceMesh:
    """The mesh of every dimension of ``degrees`` above 1 (and those in ``keep``), named and
    ordered by ``mesh_shape``; needs the process group."""
    from torch.distributed.device_mesh import init_device_mesh

    names, sizes = mesh_shape(degrees, keep=keep)
    return init_device_mesh(device_type, sizes, mesh_dim_names=names)


def build_mesh(layout: ParallelLayout, device_type: str) -> DeviceMesh:
    """The mesh of every dimension above 1 (a 1-D ``dp_shard`` mesh for one process)."""
    return init_mesh(device_type, layout.degrees(), keep=("dp_shard",))


def data_parallel_mesh(mesh: DeviceMesh, *, flat: bool = False) -> DeviceMesh:
    """The sub-mesh FSDP works on: ``(dp_replicate, dp_shard)``, or ``dp_shard`` alone.

    ``flat`` asks for one dimension (FSDP1 outside HYBRID_SHARD): the replicate dimension
    when nothing is sharded, else the shard dimension. With context parallelism (a ``cp``
    dimension) FSDP2 shards over ``dp_shard`` x ``cp`` flattened, named ``dp_shard_cp`` as
    in Hugging Face Accelerate, so the gradients of a sequence's slices are averaged too.
    """
    names = mesh.mesh_dim_names or ()
    if "cp" in names:
        shard = _flattened(mesh, ("dp_shard", "cp"), "dp_shard_cp")
        if "dp_replicate" not in names:
            return shard
        return mesh["dp_replicate", "dp_shard_cp"]
    if "dp_replicate" not in names:
        return mesh["dp_shard"]
    if flat:
        return mesh["dp_replicate"] if mesh["dp_shard"].size() == 1 else mesh["dp_shard"]
    return mesh["dp_replicate", "dp_shard"]


def _flattened(mesh: DeviceMesh, dims: tuple[str, ...], name: str) -> DeviceMesh:
    """``mesh[dims]`` flattened into one dimension called ``name``; made once per mesh."""
    try:
        return mesh[name]
    except (KeyError, RuntimeError, ValueError):
        return mesh[dims]._flatten(name)


def groups_along(mesh: DeviceMesh, name: str) -> list[list[int]]:
    """The ranks of each group along dimension ``name`` (every other index fixed, in
    row-major order), read from the mesh's rank table in plain Python: tensor operations on
    the table would lose its values under a simulation's fake tensors (docs/simulate.md)."""
    import itertools

    shape = list(mesh.mesh.shape)
    ranks = _flat(mesh.mesh.tolist())
    axis = list(mesh.mesh_dim_names or ()).index(name)
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    others = [range(n) for i, n in enumerate(shape) if i != axis]
    groups = []
    for rest in itertools.product(*others):
        index = [*rest[:axis], 0, *rest[axis:]]
        base = sum(i * s for i, s in zip(index, strides))
        groups.append([ranks[base + k * strides[axis]] for k in range(shape[axis])])
    return groups


def _flat(table: object) -> list[int]:
    """A nested list of ranks, row-major."""
    if isinstance(table, list):
        return [rank for row in table for rank in _flat(row)]
    return [int(table)]  # type: ignore[call-overload]
