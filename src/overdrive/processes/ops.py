"""Collectives over the default process group on tensors and nested lists/tuples/dicts of them.

Every function is a no-op (returns its input) when fewer than two processes run. With
``debug=True`` the ranks first exchange the shapes and dtypes of what they are about to
send and raise ``CollectiveMismatchError`` listing each rank's shapes instead of hanging.
``gather`` always checks them (it has to, to accept different first-dim sizes): one small
all-gather of integers, the descriptions exchanged only to word an error.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from overdrive.errors import OverdriveError

Leaf = tuple[str, tuple[int, ...], str]  # (path, shape, dtype)


class CollectiveMismatchError(OverdriveError):
    """Processes called one collective with data of different shapes or structure."""


# Hugging Face Accelerate's name for the same error (its scripts catch it by that name).
DistributedOperationException = CollectiveMismatchError

_debug_default = False


def set_debug_default(debug: bool) -> None:
    """Whether collectives called without ``debug=`` check shapes first (``state.debug``)."""
    global _debug_default
    _debug_default = bool(debug)


def _debug(debug: bool | None) -> bool:
    return _debug_default if debug is None else debug


# --------------------------------------------------------------------------- nested data
def is_namedtuple(data: Any) -> bool:
    return isinstance(data, tuple) and hasattr(data, "_fields")


def rebuild(template: Any, items: Any) -> Any:
    """A container like ``template`` holding ``items`` (a list, or a dict for mappings)."""
    if isinstance(template, Mapping):
        try:
            return type(template)(items)  # type: ignore[call-arg]
        except TypeError:
            return dict(items)
    if is_namedtuple(template):
        return type(template)(*items)
    if isinstance(template, tuple):
        return tuple(items)
    return list(items)


def map_tensors(fn: Callable[[torch.Tensor], Any], data: Any) -> Any:
    """Apply ``fn`` to every tensor in nested lists/tuples/dicts; other leaves pass through."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, Mapping):
        return rebuild(data, {k: map_tensors(fn, v) for k, v in data.items()})
    if isinstance(data, (list, tuple)):
        return rebuild(data, [map_tensors(fn, v) for v in data])
    return data


def tensor_leaves(data: Any, path: str = "") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in ``data`` with its path (``['x'][0]``), in a fixed order."""
    if isinstance(data, torch.Tensor):
        return [(path or "<tensor>", data)]
    out: list[tuple[str, torch.Tensor]] = []
    if isinstance(data, Mapping):
        for k, v in data.items():
            out += tensor_leaves(v, f"{path}[{k!r}]")
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            out += tensor_leaves(v, f"{path}[{i}]")
    return out


def has_non_tensor_leaves(data: Any) -> bool:
    if isinstance(data, torch.Tensor):
        return False
    if isinstance(data, Mapping):
        return any(has_non_tensor_leaves(v) for v in data.values())
    if isinstance(data, (list, tuple)):
        return len(data) == 0 or any(has_non_tensor_leaves(v) for v in data)
    return True


# --------------------------------------------------------------------------- helpers
def world_size() -> int:
    """Processes in the default group (1 when there is none)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def comm_device() -> torch.device:
    """Where a tensor sent through the default process group must live: the current GPU
    under NCCL, else (gloo, or no process group at all) the CPU."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _describe(data: Any) -> list[Leaf]:
    return [(p, tuple(t.shape), str(t.dtype).replace("torch.", "")) for p, t in tensor_leaves(data)]


def _format(per_rank: list[list[Leaf]]) -> str:
    lines = []
    for rank, leaves in enumerate(per_rank):
        shown = ", ".join(f"{p}: {list(s)} {d}" for p, s, d in leaves) or "(no tensors)"
        lines.append(f"  rank {rank}: {shown}")
    return "\n".join(lines)


def _exchange(data: Any) -> list[list[Leaf]]:
    per_rank: list[Any] = [None] * world_size()
    dist.all_gather_object(per_rank, _describe(data))
    return per_rank


def _mask(leaves: list[Leaf], free_dim: int | None) -> list[Leaf]:
    if free_dim is None:
        return leaves
    return [
        (p, tuple(-1 if i == free_dim else n for i, n in enumerate(s)), d) for p, s, d in leaves
    ]


def check_shapes(op: str, data: Any, free_dim: int | None = None) -> list[list[Leaf]]:
    """Raise ``CollectiveMismatchError`` on every rank unless all ranks send alike data.

    ``free_dim`` may differ between ranks (gather: the first dim; pad: the padded dim).
    """
    per_rank = _exchange(data)
    first = _mask(per_rank[0], free_dim)
    if any(_mask(leaves, free_dim) != first for leaves in per_rank[1:]):
        allowed = f" (dim {free_dim} may differ)" if free_dim is not None else ""
        raise CollectiveMismatchError(
            f"{op}: the processes passed tensors of different shapes{allowed}:\n"
            f"{_format(per_rank)}\n"
            f"  fix: make every process call {op} with the same structure and shapes "
            "(pad_across_processes can equalise one dimension)"
        )
    return per_rank


SIZE_SLOTS = 8
"""First-dim sizes a gather's header carries; more leaves take a second exchange."""


def _signature(leaves: list[Leaf]) -> int:
    """A number every rank computes alike from the paths, dtypes and shapes past dim 0."""
    return zlib.crc32(repr(_mask(leaves, 0)).encode())


def _first_dim_sizes(op: str, data: Any) -> list[list[int]]:
    """Per leaf, every rank's first-dim size, after checking that every rank sends the same
    structure, dtypes and shapes past dim 0. One small all-gather of integers (leaf count,
    signature, the sizes) instead of an exchange of pickled descriptions; the descriptions are
    exchanged only to word the error when the ranks differ."""
    leaves = _describe(data)
    sizes = [shape[0] for _, shape, _ in leaves]
    header = [len(leaves), _signature(leaves)]
    header += (sizes + [-1] * SIZE_SLOTS)[:SIZE_SLOTS]
    mine = torch.tensor(header, dtype=torch.int64, device=comm_device())
    table = [torch.empty_like(mine) for _ in range(world_size())]
    dist.all_gather(table, mine)
    rows = torch.stack(table).tolist()  # one read back (one device sync under NCCL)
    rows[_rank()] = header
    if any(row[:2] != header[:2] for row in rows):
        # The descriptions decide, and word the error. They agree only where the integers
        # read back were not the ones sent: a simulated rank's tensors hold no values.
        per_rank = check_shapes(op, data, free_dim=0)
        return [[theirs[i][1][0] for theirs in per_rank] for i in range(len(leaves))]
    if len(leaves) <= SIZE_SLOTS:
        return [[row[2 + i] for row in rows] for i in range(len(leaves))]
    every = torch.tensor(sizes, dtype=torch.int64, device=comm_device())
    parts = [torch.empty_like(every) for _ in rows]
    dist.all_gather(parts, every)
    by_rank = torch.stack(parts).tolist()
    return [[theirs[i] for theirs in by_rank] for i in range(len(leaves))]


# --------------------------------------------------------------------------- collectives
def gather(data: Any, *, debug: bool | None = None, ranks: list[int] | None = None) -> Any:
    """Concatenate every rank's tensors along dim 0 (0-dim tensors become one row each).

    Ranks may send different first-dim sizes; nothing is padded in the result. ``ranks``
    keeps only those ranks' parts, in that order (every rank still takes part).
    """
    del debug  # structure and shapes are always checked here
    if world_size() == 1:
        return map_tensors(_at_least_1d, data)  # same shapes as with several processes
    sizes_by_leaf = _first_dim_sizes("gather", map_tensors(_at_least_1d, data))
    leaf_iter = iter(sizes_by_leaf)

    def one(tensor: torch.Tensor) -> torch.Tensor:
        sizes = next(leaf_iter)
        t = _at_least_1d(tensor).contiguous()
        biggest = max(sizes)
        if t.shape[0] < biggest:
            pad = t.new_zeros((biggest - t.shape[0], *t.shape[1:]))
            t = torch.cat([t, pad])
        parts = [torch.empty_like(t) for _ in sizes]
        dist.all_gather(parts, t)
        order = range(len(parts)) if ranks is None else ranks
        return torch.cat([parts[r][: sizes[r]] for r in order])

    return map_tensors(one, data)


def _at_least_1d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1) if t.dim() == 0 else t


def gather_object(obj: Any) -> list[Any]:
    """Every rank's picklable object; lists are concatenated, other objects listed by rank."""
    if world_size() == 1:
        return list(obj) if isinstance(obj, list) else [obj]
    per_rank: list[Any] = [None] * world_size()
    dist.all_gather_object(per_rank, obj)
    if all(isinstance(o, list) for o in per_rank):
        return [item for o in per_rank for item in o]
    return per_rank


_REDUCE_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN", "product": "PRODUCT"}


def reduce(
    data: Any, reduction: str = "sum", *, debug: bool | None = None, group: Any = None
) -> Any:
    """Sum, average, max, min or multiply every tensor over the ranks (new tensors).

    ``group``: a process group to reduce over instead of every rank.
    """
    if reduction not in _REDUCE_OPS:
        raise ValueError(f"reduce(reduction={reduction!r}): use one of {sorted(_REDUCE_OPS)}")
    world = world_size()
    if world > 1 and group is not None:
        world = dist.get_world_size(group)
    if world == 1:
        return data
    if _debug(debug):
        check_shapes("reduce", data)
    op = getattr(dist.ReduceOp, _REDUCE_OPS[reduction])

    def one(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.detach().clone()
        dist.all_reduce(out, op=op, group=group)
        if reduction == "mean":
            out = out / world if out.is_floating_point() else out.double() / world
        return out

    return map_tensors(one, data)


def broadcast(data: Any, from_process: int = 0, *, debug: bool | None = None) -> Any:
    """Every rank gets ``from_process``'s tensors (contiguous tensors are filled in place)."""
    if world_size() == 1:
        return data
    if _debug(debug):
        check_shapes("broadcast", data)

    def one(tensor: torch.Tensor) -> torch.Tensor:
        t = tensor if tensor.is_contiguous() else tensor.contiguous()
        dist.broadcast(t, src=from_process)
        return t

    return map_tensors(one, data)


def broadcast_object_list(objects: list[Any], from_process: int = 0) -> list[Any]:
    """Fill ``objects`` (in place, also returned) with ``from_process``'s picklable objects."""
    if world_size() > 1:
        dist.broadcast_object_list(objects, src=from_process)
    return objects


def pad_across_processes(
    data: Any,
    dim: int = 0,
    pad_index: int = 0,
    pad_first: bool = False,
    *,
    debug: bool | None = None,
) -> Any:
    """Pad every tensor along ``dim`` with ``pad_index`` to the largest size any rank has."""
    world = world_size()
    if world == 1:
        return data
    if _debug(debug):
        check_shapes("pad_across_processes", data, free_dim=dim)

    def one(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() <= dim:
            return tensor
        size = torch.tensor([tensor.shape[dim]], device=comm_device())
        sizes = [torch.empty_like(size) for _ in range(world)]
        dist.all_gather(sizes, size)
        biggest = int(max(s.item() for s in sizes))
        missing = biggest - tensor.shape[dim]
        if missing == 0:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = missing
        filler = tensor.new_full(shape, pad_index)
        return torch.cat([filler, tensor] if pad_first else [tensor, filler], dim=dim)

    return map_tensors(one, data)
