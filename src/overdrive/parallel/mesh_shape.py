"""The names and sizes of a device mesh, from the degree of each dimension. Torch-free.

One order for every mesh overdrive builds, the layout's (``Topology``) and
``ParallelismConfig.build_device_mesh``'s: Hugging Face Accelerate's (``dp_replicate``,
``dp_shard``, ``cp``, ``sp``, ``tp``) with the pipeline (``pp``) outermost.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "sp", "tp")


def mesh_shape(
    degrees: Mapping[str, int], *, keep: Collection[str] = ()
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(names, sizes) of the mesh of ``degrees``: every dimension above 1, and those named in
    ``keep`` whatever their size, outermost first (``MESH_ORDER``)."""
    unknown = set(degrees) - set(MESH_ORDER)
    if unknown:
        raise ValueError(f"unknown mesh dimensions {sorted(unknown)}; known: {MESH_ORDER}")
    kept = [(n, degrees.get(n, 1)) for n in MESH_ORDER if degrees.get(n, 1) > 1 or n in keep]
    return tuple(n for n, _ in kept), tuple(d for _, d in kept)
