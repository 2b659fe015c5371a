"""Reading sharded state: the rank files' chunk tables, and boxes assembled from chunks.

Every saving process wrote ``{stem}.rank{r}.json`` (plain JSON: its chunk table, and on
rank 0 the tree) and, when it held any tensor, ``{stem}.rank{r}.safetensors``. A reader
asks for any box of a global tensor; only the saved chunks that overlap it are read, slice
by slice, from memory-mapped files. Nothing here unpickles anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import NamedTuple, Protocol, cast

import torch
from safetensors import SafetensorError, safe_open

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.records import ShardTable
from overdrive.checkpoint.serialization import PICKLE_SUFFIXES, read_json, unflatten
from overdrive.checkpoint.tensor_file import DTYPE_OF_NAME

FORMAT = "overdrive-shards"
VERSION = 1
_DAMAGED = "  fix: the checkpoint is damaged; load another one"


def rank_file(stem: str, rank: int, suffix: str) -> str:
    """``{stem}.rank{rank}.{suffix}``."""
    return f"{stem}.rank{rank}.{suffix}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: object, where: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError(f"{where}: {name!r} is not a torch dtype\n{_DAMAGED}")
    return dtype


def _ints(value: object, where: str) -> tuple[int, ...]:
    if not (
        isinstance(value, list)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise CheckpointError(f"{where}: {value!r} is not a list of sizes\n{_DAMAGED}")
    return tuple(value)


@dataclass(frozen=True)
class Chunk:
    """One saved box: ``file``'s tensor ``key`` is the box at ``offsets`` of a global tensor."""

    file: Path
    key: str
    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def parse(cls, file: Path, record: object, where: str) -> Chunk:
        if not isinstance(record, dict) or not isinstance(record.get("key"), str):
            raise CheckpointError(f"{where}: malformed chunk record {record!r}\n{_DAMAGED}")
        at = f"{where}, chunk {record['key']!r}"
        chunk = cls(
            file,
            record["key"],
            _ints(record.get("offsets"), at),
            _ints(record.get("shape"), at),
            _ints(record.get("global_shape"), at),
            parse_dtype(record.get("dtype"), at),
        )
        dims = {len(chunk.offsets), len(chunk.shape), len(chunk.global_shape)}
        inside = all(o + s <= g for o, s, g in zip(chunk.offsets, chunk.shape, chunk.global_shape))
        if len(dims) != 1 or not inside:
            raise CheckpointError(f"{at}: the box lies outside the tensor\n{_DAMAGED}")
        return chunk


class Piece(NamedTuple):
    """Part of a box read from one chunk: ``src`` in the chunk, landing at ``dst`` in the box."""

    chunk: Chunk
    src: tuple[slice, ...]
    dst: tuple[slice, ...]


class SafeSlice(Protocol):
    """One tensor of an open safetensors file (``safe_open(...).get_slice(name)``): its
    shape and dtype name, and any box of it read on indexing."""

    def get_shape(self) -> list[int]: ...

    def get_dtype(self) -> str: ...

    def __getitem__(self, box: tuple[slice, ...] | EllipsisType) -> torch.Tensor: ...


class SafeFile(Protocol):
    """What overdrive reads of ``safetensors.safe_open(path, framework="pt")``."""

    def keys(self) -> list[str]: ...

    def get_tensor(self, name: str) -> torch.Tensor: ...

    def get_slice(self, name: str) -> SafeSlice: ...


class OpenFiles:
    """Safetensors files opened once each, memory-mapped; nothing is read until sliced."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._handles: dict[Path, SafeFile] = {}
        self._names: dict[Path, set[str]] = {}

    def handle(self, path: Path) -> SafeFile:
        if path not in self._handles:
            try:
                self._handles[path] = safe_open(str(path), framework="pt", device="cpu")
            except (SafetensorError, OSError, ValueError) as exc:
                raise CheckpointError(
                    f"{self.what}: {path} is not a readable safetensors file ({exc})\n"
                    "  fix: the checkpoint is damaged or incomplete; load another one"
                ) from exc
            self._names[path] = set(self._handles[path].keys())
        return self._handles[path]

    def names(self, path: Path) -> set[str]:
        self.handle(path)
        return self._names[path]

    def tensor(self, path: Path, name: str) -> torch.Tensor:
        return self.handle(path).get_tensor(name)

    def read(self, chunk: Chunk, box: tuple[slice, ...]) -> torch.Tensor:
        """The part ``box`` (relative to the chunk) of a chunk, checked against its record."""
        piece = self._slice(chunk)
        data = piece[box] if box else piece[...]
        if data.dtype != chunk.dtype:
            raise CheckpointError(
                f"{self.what}: {chunk.file}: chunk {chunk.key!r} holds {data.dtype}, but its "
                f"table says {chunk.dtype}\n{_DAMAGED}"
            )
        return data

    def check(self, chunk: Chunk) -> None:
        """Raise unless ``chunk`` is in its file with its recorded shape and dtype."""
        held = DTYPE_OF_NAME.get(self._slice(chunk).get_dtype())
        if held != chunk.dtype:
            raise CheckpointError(
                f"{self.what}: {chunk.file}: chunk {chunk.key!r} holds {held}, but its "
                f"table says {chunk.dtype}\n{_DAMAGED}"
            )

    def _slice(self, chunk: Chunk) -> SafeSlice:
        f = self.handle(chunk.file)
        if chunk.key not in self.names(chunk.file):
            raise CheckpointError(
                f"{self.what}: {chunk.file} lacks the chunk {chunk.key!r} its table lists"
                f"\n{_DAMAGED}"
            )
        piece = f.get_slice(chunk.key)
        if tuple(piece.get_shape()) != chunk.shape:
            raise CheckpointError(
                f"{self.what}: {chunk.file}: chunk {chunk.key!r} has shape "
                f"{tuple(piece.get_shape())}, but its table says {chunk.shape}\n{_DAMAGED}"
            )
        return piece


class BoxReader:
    """Any box of one saved global tensor, assembled from the chunks that overlap it."""

    def __init__(
        self,
        what: str,
        key: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        chunks: list[Chunk],
        files: OpenFiles,
    ) -> None:
        self.what, self.key, self.shape, self.dtype = what, key, torch.Size(shape), dtype
        self.chunks, self._files = chunks, files
        for c in chunks:
            if c.global_shape != tuple(shape) or c.dtype != dtype:
                raise CheckpointError(
                    f"{what}: {c.file}: chunk {key!r} belongs to a {c.dtype} tensor of shape "
                    f"{c.global_shape}, but the tree says {dtype} {tuple(shape)}\n{_DAMAGED}"
                )

    def read_full(self) -> torch.Tensor:
        return self.read((0,) * len(self.shape), tuple(self.shape))

    def read(self, offsets: tuple[int, ...], shape: tuple[int, ...]) -> torch.Tensor:
        """The box of size ``shape`` starting at ``offsets`` of the global tensor."""
        offsets, shape = self._fitting(offsets, shape)
        inside = self._chunk_holding(offsets, shape)
        if inside is not None:  # one slice of one file, read straight into its own tensor
            box = zip(offsets, shape, inside.offsets)
            return self._files.read(inside, tuple(slice(o - co, o - co + s) for o, s, co in box))
        out = torch.empty(shape, dtype=self.dtype)
        for chunk, src, dst in self.pieces(offsets, shape):
            out[dst] = self._files.read(chunk, src)
        return out

    def pieces(self, offsets: tuple[int, ...], shape: tuple[int, ...]) -> list[Piece]:
        """What filling the box at ``offsets`` reads: each overlapping chunk, its part (in
        the chunk's coordinates) and where that lands in the box. Everything that could fail
        is checked first (the box fits, the chunks tile it, each chunk is in its file with
        its recorded shape and dtype), so a copy that follows cannot stop half way."""
        offsets, shape = self._fitting(offsets, shape)
        overlaps = []  # (chunk, low and high corner of its overlap with the box)
        for chunk in self.chunks:
            lo = tuple(max(o, co) for o, co in zip(offsets, chunk.offsets))
            ends = zip(offsets, shape, chunk.offsets, chunk.shape)
            hi = tuple(min(o + s, co + cs) for o, s, co, cs in ends)
            if all(a < b for a, b in zip(lo, hi)):
                overlaps.append((chunk, lo, hi))
        for chunk, _, _ in overlaps:
            self._files.check(chunk)
        if not _tiles(overlaps, shape):
            self._refuse_gap(overlaps, offsets, shape)  # overlapping chunks hold equal data
        out = []
        for chunk, lo, hi in overlaps:
            src = tuple(slice(a - co, b - co) for a, b, co in zip(lo, hi, chunk.offsets))
            dst = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, offsets))
            out.append(Piece(chunk, src, dst))
        return out

    def read_into(self, out: torch.Tensor, pieces: list[Piece]) -> None:
        """Copy the checked ``pieces`` (of ``out``'s box) from the files into ``out``."""
        for chunk, src, dst in pieces:
            out[dst].copy_(self._files.read(chunk, src))

    def _fitting(
        self, offsets: tuple[int, ...], shape: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        offsets, shape = tuple(int(o) for o in offsets), tuple(int(s) for s in shape)
        if (
            len(offsets) != len(self.shape)
            or len(shape) != len(self.shape)
            or any(o < 0 or s < 0 or o + s > g for o, s, g in zip(offsets, shape, self.shape))
        ):
            raise CheckpointError(
                f"{self.what}: box at {offsets} of shape {shape} does not fit {self.key!r} "
                f"(shape {tuple(self.shape)})\n  fix: the model must have the saved shapes"
            )
        return offsets, shape

    def _refuse_gap(
        self,
        pieces: list[tuple[Chunk, tuple[int, ...], tuple[int, ...]]],
        offsets: tuple[int, ...],
        shape: tuple[int, ...],
    ) -> None:
        """Raise naming the first element of the box no chunk covers, if there is one."""
        covered = torch.zeros(shape, dtype=torch.bool)
        for _, lo, hi in pieces:
            covered[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, offsets))] = True
        if not bool(covered.all()):
            first = [int(i) + o for i, o in zip((~covered).nonzero()[0], offsets)]
            raise CheckpointError(
                f"{self.what}: {self.key!r}: element {first} of the box at {offsets} of shape "
                f"{shape} is in no saved chunk (chunks from "
                f"{sorted({c.file.name for c in self.chunks}) or 'no file'})\n"
                "  fix: the checkpoint is incomplete; load another one"
            )

    def _chunk_holding(self, offsets: tuple[int, ...], shape: tuple[int, ...]) -> Chunk | None:
        """A saved chunk that holds the whole box, if one does."""
        for chunk in self.chunks:
            ends = zip(offsets, shape, chunk.offsets, chunk.shape)
            if all(co <= o and o + s <= co + cs for o, s, co, cs in ends):
                return chunk
        return None


def _tiles(
    pieces: list[tuple[Chunk, tuple[int, ...], tuple[int, ...]]], shape: tuple[int, ...]
) -> bool:
    """Whether disjoint overlaps fill the box exactly (then no element can be missing); False
    also when two overlap, which only an element-wise check can settle."""
    volume = sum(math.prod(b - a for a, b in zip(lo, hi)) for _, lo, hi in pieces)
    for i, (_, lo, hi) in enumerate(pieces):
        for _, lo2, hi2 in pieces[i + 1 :]:
            if all(max(a, c) < min(b, d) for a, b, c, d in zip(lo, hi, lo2, hi2)):
                return False
    return volume == math.prod(shape)


class _LazyTensors(Mapping[str, torch.Tensor]):
    """Rank 0's plain tensors, read one by one when the tree asks for them."""

    def __init__(self, files: OpenFiles, path: Path) -> None:
        self._files, self._path = files, path
        self._names = files.names(path)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        return self._files.tensor(self._path, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _not_found(directory: Path, stem: str, what: str) -> CheckpointError:
    if not directory.is_dir():
        return CheckpointError(f"{what}: {directory} is not a directory\n{_DAMAGED}")
    unsafe = sorted(
        p.name
        for p in directory.iterdir()
        if p.name == ".metadata"
        or p.suffix == ".distcp"
        or (p.name.startswith(f"{stem}.") and p.suffix in PICKLE_SUFFIXES)
    )
    text = f"{what}: {directory} holds no {rank_file(stem, 0, 'json')}"
    if unsafe:
        text += (
            f"; it holds {', '.join(unsafe)}: pickle files (or torch.distributed.checkpoint "
            "files, whose metadata is a pickle), which overdrive does not load because "
            "unpickling runs whatever code they contain"
        )
    return CheckpointError(text + "\n  fix: load a checkpoint that overdrive saved")


def read_tables(directory: Path, stem: str, what: str) -> dict[int, ShardTable]:
    """Every saving rank's JSON, checked: one format, one world size, no rank missing."""
    pattern = re.compile(re.escape(stem) + r"\.rank(\d+)\.json")
    found = {}
    if directory.is_dir():
        for p in directory.iterdir():
            m = pattern.fullmatch(p.name)
            if m:
                found[int(m.group(1))] = p
    if not found:
        raise _not_found(directory, stem, what)
    tables = {}
    for rank, path in found.items():
        table = read_json(path)
        if (
            not isinstance(table, dict)
            or table.get("format") != FORMAT
            or table.get("rank") != rank
            or not isinstance(table.get("world_size"), int)
            or not isinstance(table.get("chunks"), list)
        ):
            raise CheckpointError(f"{what}: {path} is not an overdrive shard table\n{_DAMAGED}")
        if table.get("version") != VERSION:
            raise CheckpointError(
                f"{what}: {path} has shard format version {table.get('version')!r}; this "
                f"overdrive reads version {VERSION}\n  fix: load it with the overdrive "
                "version that saved it"
            )
        tables[rank] = cast(ShardTable, table)  # an overdrive shard table, as checked above
    world = tables[min(tables)]["world_size"]
    if any(t["world_size"] != world for t in tables.values()):
        sizes = sorted({t["world_size"] for t in tables.values()})
        raise CheckpointError(
            f"{what}: the {stem}.rank*.json files in {directory} come from saves by "
            f"{sizes} processes (mixed saves)\n{_DAMAGED}"
        )
    missing = [rank_file(stem, r, "json") for r in range(world) if r not in tables]
    extra = [rank_file(stem, r, "json") for r in tables if r >= world]
    if missing or extra:
        problem = f"{', '.join(missing)} missing" if missing else f"{', '.join(extra)} extra"
        raise CheckpointError(
            f"{what}: {directory} was saved by {world} process(es), but {problem}\n"
            f"  fix: the checkpoint is incomplete; copy every {stem}.rank* file with it, "
            "or load another one"
        )
    return tables


Place = Callable[[str, torch.Size, torch.dtype, BoxReader], object]
"""What ``load_shards`` calls for each sharded entry: ``place(key, global_shape, dtype,
reader)`` returns what the tree holds there."""


def full_tensor(key: str, shape: torch.Size, dtype: torch.dtype, reader: BoxReader) -> torch.Tensor:
    """The default ``place``: the whole global tensor, on CPU."""
    return reader.read_full()


def load_shards(directory: Path, stem: str, *, what: str, place: Place | None = None) -> object:
    """Rebuild the tree that ``save_shards`` wrote, whatever the number of saving ranks.

    Each sharded entry becomes ``place(key, global_shape, dtype, reader)``; by default the
    full tensor. Raises ``CheckpointError`` naming the file or key that is missing or wrong.
    """
    directory = Path(directory)
    tables = read_tables(directory, stem, what)
    chunks: dict[str, list[Chunk]] = {}
    for rank, table in sorted(tables.items()):
        where = f"{what}: {directory / rank_file(stem, rank, 'json')}"
        file = directory / rank_file(stem, rank, "safetensors")
        for record in table["chunks"]:
            chunk = Chunk.parse(file, record, where)
            chunks.setdefault(chunk.key, []).append(chunk)
    files = OpenFiles(what)
    root = tables[0]
    plain: Mapping[str, torch.Tensor] = {}
    if root.get("tensors"):
        plain = _LazyTensors(files, directory / rank_file(stem, 0, "safetensors"))

    def sharded(entry: dict[str, object]) -> object:
        key = entry["__sharded__"]
        where = f"{what}: sharded entry {key!r}"
        if not isinstance(key, str):
            raise CheckpointError(f"{where}: its key is not a string\n{_DAMAGED}")
        shape = _ints(entry.get("shape"), where)
        dtype = parse_dtype(entry.get("dtype"), where)
        reader = BoxReader(what, key, shape, dtype, chunks.get(key, []), files)
        return (place or full_tensor)(key, torch.Size(shape), dtype, reader)

    if "tree" not in root:
        raise CheckpointError(
            f"{what}: {directory / rank_file(stem, 0, 'json')} holds no tree\n{_DAMAGED}"
        )
    return unflatten(root["tree"], plain, what=what, sharded=sharded)


def merge_full(directory: Path, stem: str, *, what: str | None = None) -> dict[str, torch.Tensor]:
    """The full tensors of a sharded model state dict; needs no process group."""
    what = what or f"{stem} in {directory}"
    tree = load_shards(directory, stem, what=what)
    if not isinstance(tree, dict) or not all(isinstance(k, str) for k in tree):
        raise CheckpointError(
            f"{what}: {directory}/{stem} is not a model state dict (names to tensors)\n"
            "  fix: pass a model part of the checkpoint"
        )
    return {k: v for k, v in tree.items() if isinstance(v, torch.Tensor)}
