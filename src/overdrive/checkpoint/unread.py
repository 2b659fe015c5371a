"""A saved state read as the loading layout needs it: every tensor starts unread, and is then
read as the tensor at the same place in this run's state is laid out (this process's box of a
sharded tensor, nothing for another pipeline stage's, the whole tensor otherwise).

Both kinds of save go through it: a state written whole by one process (``stem.json`` +
``stem.safetensors``, each tensor one chunk) and one written in shards by several. Keys can be
converted (by position, by name, DeepSpeed's form) before anything is read, so a process of a
sharded layout never holds more of a checkpoint than its own part.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.serialization import SavedTensor, read_json, unflatten
from overdrive.checkpoint.shard_reader import BoxReader, Chunk, OpenFiles, load_shards
from overdrive.checkpoint.shards import read_as
from overdrive.checkpoint.tensor_file import DTYPE_OF_NAME


class Unread:
    """A saved tensor not read yet; ``reader`` gives any box of it."""

    __slots__ = ("reader",)

    def __init__(self, reader: BoxReader) -> None:
        self.reader = reader

    @property
    def shape(self) -> torch.Size:
        return self.reader.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.reader.dtype

    def numpy(self) -> npt.NDArray[np.generic]:
        return self.reader.read_full().numpy()


class _UnreadFile(Mapping[str, Unread]):
    """The tensors of one safetensors file, each an ``Unread`` over one whole-tensor chunk."""

    def __init__(self, files: OpenFiles, path: Path, what: str) -> None:
        self._files, self._path, self._what = files, path, what
        self._names = files.names(path)

    def __getitem__(self, name: str) -> Unread:
        if name not in self._names:
            raise KeyError(name)
        piece = self._files.handle(self._path).get_slice(name)
        shape, dtype = tuple(piece.get_shape()), DTYPE_OF_NAME.get(piece.get_dtype())
        if dtype is None:
            raise CheckpointError(
                f"{self._what}: {self._path}: tensor {name!r} has dtype {piece.get_dtype()}, "
                "which overdrive does not write\n  fix: the checkpoint is damaged; load another one"
            )
        chunk = Chunk(self._path, name, (0,) * len(shape), shape, shape, dtype)
        return Unread(BoxReader(self._what, name, shape, dtype, [chunk], self._files))

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _unread(key: str, shape: torch.Size, dtype: torch.dtype, reader: BoxReader) -> Unread:
    return Unread(reader)


def load_unread(directory: Path, stem: str, *, what: str, sharded: bool) -> object:
    """The tree a save wrote (``sharded``: by several processes), every tensor ``Unread``."""
    if sharded:
        return load_shards(directory, stem, what=what, place=_unread)
    meta_path = directory / f"{stem}.json"
    if not meta_path.exists():
        raise CheckpointError(
            f"{what}: {meta_path} is missing\n  fix: the checkpoint is incomplete; load another one"
        )
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or "state" not in meta:
        raise CheckpointError(f"{what}: {meta_path} is not an overdrive state file")
    tensors: Mapping[str, SavedTensor] = {}
    if meta.get("tensors"):
        tensors = _UnreadFile(OpenFiles(what), directory / f"{stem}.safetensors", what)
    return unflatten(meta["state"], tensors, what=what)


def unread_safetensors(path: Path, *, what: str) -> Mapping[str, Unread]:
    """Every tensor of a plain safetensors file (one without overdrive's JSON table), unread."""
    if not path.is_file():
        raise CheckpointError(f"{what}: {path} is missing\n  fix: pass the folder it was saved to")
    return _UnreadFile(OpenFiles(what), path, what)


def read_like(tree: object, template: object) -> object:
    """``tree`` with every ``Unread`` read as the leaf at the same place in ``template`` is
    laid out: a DTensor's box, a ``LocalShard``'s box (None for another stage's placeholder),
    else the whole tensor. One tensor is read at a time."""
    if isinstance(tree, Unread):
        return read_as(template, tree.reader)
    if isinstance(tree, dict):
        mine = template if isinstance(template, Mapping) else {}
        return {k: read_like(v, mine.get(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        if not (isinstance(template, (list, tuple)) and len(template) == len(tree)):
            template = [None] * len(tree)
        items = [read_like(v, t) for v, t in zip(tree, template)]
        return items if isinstance(tree, list) else tuple(items)
    return tree
