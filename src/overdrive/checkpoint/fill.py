"""Saved tensors read straight into the live tensors they restore.

``read_like`` reads each saved box into fresh memory, which ``load_state_dict`` then copies
into the model (or keeps, for an optimizer): two passes over the bytes, the first into pages
the kernel must zero. When a part's saved tree has exactly the shape of this run's state (the
same keys at every level, every saved tensor at a place where this run holds a tensor of
the same shape and dtype), each box is instead copied from the memory-mapped checkpoint into
the tensor it restores, on this process's I/O threads.

Planning checks everything a read could refuse (each box fits, the saved chunks tile it,
each chunk is in its file as recorded) before anything is written, and a part is only filled
when restoring it cannot fail: a part that does not fit is read the old way, and its restore
names what differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import torch

from overdrive.checkpoint.io_threads import run_all
from overdrive.checkpoint.serialization import is_dtensor
from overdrive.checkpoint.shard_reader import BoxReader, Piece
from overdrive.checkpoint.shards import LocalShard, check_placements, read_as
from overdrive.checkpoint.unread import Unread, read_like


@dataclass
class Fill:
    """A part's tree with its live tensors in place of the saved ones, and the copies that
    put the saved bytes into them (run by ``fill_all``)."""

    tree: object
    copies: list[tuple[BoxReader, torch.Tensor, list[Piece]]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(out.numel() * out.element_size() for _, out, _ in self.copies)


def plan_fill(tree: object, template: object) -> Fill | None:
    """How to fill ``template``'s tensors from ``tree`` (a saved state whose tensors are
    ``Unread``), or None when the two differ anywhere (the part is then read the old way)."""
    if not _same_shape(tree, template):
        return None
    fill = Fill(tree=None)
    tree_out = _plan(tree, template, fill)
    if tree_out is _NO:
        return None
    fill.tree = tree_out
    return fill


def fill_all(fills: list[Fill]) -> None:
    """Run every planned copy, spread over this process's I/O threads (largest first)."""
    copies = sorted(
        (c for f in fills for c in f.copies), key=lambda c: -c[1].numel() * c[1].element_size()
    )

    def copy(item: tuple[BoxReader, torch.Tensor, list[Piece]]) -> None:
        reader, out, pieces = item
        with torch.no_grad():
            reader.read_into(out, pieces)

    run_all(copy, copies)


def read_or_fill(tree: object, template: object) -> tuple[object, Fill | None]:
    """The part read as ``template`` lays it out: planned to be filled in place when it fits
    (nothing read yet), else read now into fresh memory (``read_like``)."""
    fill = plan_fill(tree, template)
    if fill is not None:
        return fill.tree, fill
    return read_like(tree, template), None


_NO = object()  # a leaf that cannot be filled in place


def _plan(tree: object, template: object, fill: Fill) -> object:
    """``tree`` planned into ``template``, which has its shape (``_same_shape``)."""
    if isinstance(tree, Unread):
        return _plan_leaf(tree.reader, template, fill)
    if isinstance(tree, dict):
        mapping = cast(Mapping[object, object], template)
        out = {}
        for k, v in tree.items():
            got = _plan(v, mapping[k], fill)
            if got is _NO:
                return _NO
            out[k] = got
        return out
    if isinstance(tree, (list, tuple)):
        items = []
        for v, t in zip(tree, cast(Sequence[object], template)):
            got = _plan(v, t, fill)
            if got is _NO:
                return _NO
            items.append(got)
        return items if isinstance(tree, list) else tuple(items)
    return tree


def _plan_leaf(reader: BoxReader, template: object, fill: Fill) -> object:
    """The live tensor that will hold ``reader``'s box (what the restore is given), or
    ``_NO``. A placeholder (another process's tensor) reads nothing, as ``read_as`` does."""
    if isinstance(template, LocalShard):
        if template.data.is_meta:
            return read_as(template, reader)
        out, offsets, result = template.data, template.offsets, template.data
        global_shape = template.global_shape
    elif is_dtensor(template):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        check_placements(template, reader.what, reader.key)
        mesh, placements = template.device_mesh, template.placements
        if mesh.get_coordinate() is None:
            return _NO
        shape, offsets = compute_local_shape_and_global_offset(template.shape, mesh, placements)
        out, result, global_shape = template._local_tensor, template, tuple(template.shape)
        if tuple(out.shape) != tuple(shape):
            return _NO
    elif isinstance(template, torch.Tensor) and not template.is_meta:
        out, offsets, result, global_shape = template, (0,) * template.dim(), template, None
    else:
        return _NO
    if (
        (global_shape or tuple(out.shape)) != tuple(reader.shape)
        or out.dtype != reader.dtype
        or out.is_meta
    ):
        return _NO
    fill.copies.append((reader, out, reader.pieces(tuple(offsets), tuple(out.shape))))
    return result


def _same_shape(tree: object, template: object) -> bool:
    """Whether ``template`` has every container of ``tree`` with the same keys or length."""
    if isinstance(tree, dict):
        return (
            isinstance(template, Mapping)
            and set(tree) == set(template)
            and all(_same_shape(v, template[k]) for k, v in tree.items())
        )
    if isinstance(tree, (list, tuple)):
        return (
            isinstance(template, (list, tuple))
            and len(tree) == len(template)
            and all(_same_shape(v, t) for v, t in zip(tree, template))
        )
    return True
