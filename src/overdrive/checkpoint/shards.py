"""Sharded state without pickle: every process writes its own pieces, any number reads them.

``save_shards`` writes, per process, ``{stem}.rank{r}.safetensors`` (the tensors) and
``{stem}.rank{r}.json`` (plain JSON: the chunk table, and on rank 0 the tree). A DTensor
leaf is written as this process's box of the global tensor (a box replicated over several
processes is written once); everything else in the tree is written by rank 0. ``load_shards``
rebuilds the tree from the files of any number of saving processes and hands each sharded
entry to ``place`` with a ``BoxReader``, so a new process layout reads just its own boxes
(resharding on load). PyTorch's own distributed checkpoint format is not used: its metadata
is a pickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.records import JSON, ChunkRecord, FileRecord, ShardTable
from overdrive.checkpoint.serialization import flatten, is_dtensor, write_json, writing
from overdrive.checkpoint.shard_reader import (
    FORMAT,
    VERSION,
    BoxReader,
    Place,
    dtype_name,
    load_shards,
    merge_full,
    rank_file,
)
from overdrive.checkpoint.tensor_file import write_safetensors

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

__all__ = [
    "BoxReader",
    "box_like",
    "LocalShard",
    "dtensor_like",
    "load_shards",
    "local_shard",
    "merge_full",
    "place_like",
    "read_as",
    "save_shards",
]


@dataclass(frozen=True)
class LocalShard:
    """This process's box of a global tensor: ``data`` sits at ``offsets`` in a tensor of
    ``global_shape``. ``write=False``: another process holds and writes the same box.
    A tree leaf ``save_shards`` writes as a chunk; DTensor leaves are turned into one."""

    data: torch.Tensor
    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]
    write: bool = True


def check_placements(dt: DTensor, what: str, key: str) -> None:
    """Shard, Replicate, and FSDP2's strided shard over a tensor-parallel shard (FSDP x TP):
    each process's piece of those is one box, found by PyTorch's own offset computation
    (``local_shard`` checks the piece's shape against it)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    boxed = (Shard, _StridedShard)
    if not all(type(p) in boxed or p.is_replicate() for p in dt.placements):
        raise CheckpointError(
            f"{what}: {key!r} is placed as {tuple(dt.placements)}; only Shard(dim) and "
            "Replicate() placements (and FSDP2's strided shards) can be saved as boxes\n"
            "  fix: redistribute it to "
            "Shard/Replicate placements (or save the full tensor) before saving"
        )


def local_shard(dt: DTensor, *, what: str, key: str) -> LocalShard:
    """The box a DTensor holds on this process, and whether this process writes it: a box
    replicated over mesh dims is written by the process at coordinate 0 on all of them."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    check_placements(dt, what, key)
    mesh, global_shape = dt.device_mesh, tuple(dt.shape)
    coordinate = mesh.get_coordinate()
    if coordinate is None:  # this process is not in the tensor's mesh
        return LocalShard(torch.empty(0), global_shape, (0,) * len(global_shape), write=False)
    shape, offsets = compute_local_shape_and_global_offset(dt.shape, mesh, dt.placements)
    local = dt.to_local()
    if tuple(local.shape) != tuple(shape):
        raise CheckpointError(
            f"{what}: {key!r} holds a local tensor of shape {tuple(local.shape)} where its "
            f"placements {tuple(dt.placements)} give {tuple(shape)} (a padded or custom "
            "split)\n  fix: save DTensors whose local pieces follow torch.chunk's split"
        )
    replicated = [c for c, p in zip(coordinate, dt.placements) if p.is_replicate()]
    return LocalShard(local, global_shape, tuple(offsets), write=all(c == 0 for c in replicated))


class _Chunks:
    """The chunk table and tensors one process writes."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.records: list[ChunkRecord] = []
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[int] = set()

    def __call__(self, leaf: object, key: str) -> dict[str, JSON]:
        if isinstance(leaf, LocalShard):
            piece = leaf
        else:  # flatten hands over LocalShards and DTensors only
            piece = local_shard(cast("DTensor", leaf), what=self.what, key=key)
        dtype = dtype_name(piece.data.dtype)
        shape = [int(s) for s in piece.global_shape]
        if piece.write and piece.data.numel():
            self.tensors[key] = self._standalone(piece.data)
            self.records.append(
                {
                    "key": key,
                    "offsets": [int(o) for o in piece.offsets],
                    "shape": list(piece.data.shape),
                    "global_shape": shape,
                    "dtype": dtype,
                }
            )
        return {"shape": shape, "dtype": dtype}

    def _standalone(self, t: torch.Tensor) -> torch.Tensor:
        """A contiguous CPU tensor with storage of its own (safetensors needs that)."""
        t = t.detach().cpu().contiguous()
        storage = t.untyped_storage()
        if storage.data_ptr() in self._storages or storage.nbytes() != t.numel() * t.itemsize:
            t = t.clone()
        self._storages.add(t.untyped_storage().data_ptr())
        return t


def save_shards(
    tree: object,
    directory: Path,
    stem: str,
    *,
    rank: int,
    what: str,
    world_size: int | None = None,
    checksums: dict[Path, FileRecord] | None = None,
) -> list[Path]:
    """Write this process's pieces of ``tree``; returns the paths written.

    Call it on every process of the group (``world_size`` defaults to the group's size).
    ``checksums`` receives the tensor file's record (``integrity.checksum``'s), by path.
    """
    import torch.distributed as dist

    if world_size is None:
        initialized = dist.is_available() and dist.is_initialized()
        world_size = dist.get_world_size() if initialized else 1
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a group of {world_size} process(es)")
    chunks = _Chunks(what)
    structure, plain = flatten(tree, what=what, sharded=chunks, sharded_types=(LocalShard,))
    tensors = {**plain, **chunks.tensors} if rank == 0 else chunks.tensors
    directory = Path(directory)
    written = []
    if tensors:
        path = directory / rank_file(stem, rank, "safetensors")
        with writing(path, what):
            record = write_safetensors(tensors, path, {"format": "pt"})
        if checksums is not None:
            checksums[path] = record
        written.append(path)
    table: ShardTable = {
        "format": FORMAT,
        "version": VERSION,
        "rank": rank,
        "world_size": world_size,
        "tensors": bool(tensors),
        "chunks": chunks.records,
        "tree": structure if rank == 0 else None,
    }
    written.append(directory / rank_file(stem, rank, "json"))
    write_json(written[-1], table)
    return written


def dtensor_like(template: DTensor, reader: BoxReader) -> DTensor:
    """A DTensor with ``template``'s mesh, placements and global shape, whose local data (this
    process's box, in the template's dtype and device) is read from ``reader``."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    check_placements(template, reader.what, reader.key)
    _check_like(tuple(template.shape), template.dtype, reader)
    mesh, placements = template.device_mesh, template.placements
    shape, offsets = compute_local_shape_and_global_offset(template.shape, mesh, placements)
    local = reader.read(offsets, shape)
    local = local.to(device=template.to_local().device)
    return DTensor.from_local(
        local, mesh, placements, run_check=False, shape=template.shape, stride=template.stride()
    )


def box_like(template: LocalShard, reader: BoxReader) -> torch.Tensor | None:
    """``template``'s box of the saved tensor, on its device; None for a placeholder (data
    on the meta device: another process holds that tensor, nothing is read)."""
    if template.data.is_meta:
        return None
    _check_like(tuple(template.global_shape), template.data.dtype, reader)
    box = reader.read(template.offsets, tuple(template.data.shape))
    return box.to(device=template.data.device)


def _check_like(shape: tuple[int, ...], dtype: torch.dtype, reader: BoxReader) -> None:
    if shape != tuple(reader.shape):
        raise CheckpointError(
            f"{reader.what}: {reader.key!r} was saved with shape {tuple(reader.shape)}, but "
            f"this run's tensor has shape {shape}\n  fix: build the model and "
            "optimizer exactly as in the run that saved the checkpoint"
        )
    if reader.dtype != dtype:
        raise CheckpointError(
            f"{reader.what}: {reader.key!r} is stored as {reader.dtype}, but this run's tensor "
            f"is {dtype}; loading does not cast\n  fix: build the model in the dtype "
            "of the run that saved the checkpoint (the same .half()/.to(...) before prepare())"
        )


def place_like(template: object, *, what: str) -> Place:
    """A ``place`` for ``load_shards`` that rebuilds each sharded entry like the DTensor at the
    same path in ``template`` (e.g. this run's ``get_model_state_dict``), or reads the box of
    a ``LocalShard`` there (``box_like``: None for a placeholder); a plain tensor there, or
    nothing, gets the full tensor."""
    found: dict[str, object] = {}

    def collect(leaf: object, key: str) -> dict[str, JSON]:
        found[key] = leaf
        return {}

    flatten(template, what=what, sharded=collect, sharded_types=(LocalShard,))

    def place(
        key: str, shape: torch.Size, dtype: torch.dtype, reader: BoxReader
    ) -> torch.Tensor | None:
        return read_as(found.get(key), reader)

    return place


def read_as(leaf: object, reader: BoxReader) -> torch.Tensor | None:
    """The saved tensor ``reader`` gives, read as ``leaf`` (this run's tensor at its place)
    is laid out: a DTensor's box, a ``LocalShard``'s box (None for a placeholder), else the
    whole tensor."""
    if isinstance(leaf, LocalShard):
        return box_like(leaf, reader)
    if is_dtensor(leaf):
        return dtensor_like(leaf, reader)
    return reader.read_full()
