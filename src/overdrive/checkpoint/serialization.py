"""State without pickle: tensors go to safetensors, the structure around them to JSON.

A state dict (optimizer, scheduler, scaler, custom object...) is a tree of dicts, lists,
tuples, scalars and tensors. ``flatten`` replaces every tensor by a named reference and
encodes what plain JSON cannot say (int dict keys, tuples, inf/nan, dtypes) as small tagged
objects; ``unflatten`` reverses it. Loading never runs code from the files.
"""

from __future__ import annotations

import codecs
import errno
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from overdrive.checkpoint.errors import CheckpointError, UnsafeCheckpointError
from overdrive.checkpoint.records import JSON, FileRecord
from overdrive.checkpoint.tensor_file import write_safetensors

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl")
_NP_CORE = np._core if hasattr(np, "_core") else np.core  # numpy 2 renamed its core module
WEIGHTS_ONLY_GLOBALS: tuple[Any, ...] = (
    _NP_CORE.multiarray._reconstruct,
    np.ndarray,
    codecs.encode,
    np.dtype,
    *((np.dtypes.UInt32DType,) if hasattr(np, "dtypes") else ()),
)
"""What ``load_weights_only`` lets torch rebuild besides tensors and plain containers: numpy
arrays and dtypes (RNG states hold them) and the codec a pickled array's bytes go through.
Hugging Face Accelerate's ``TORCH_SAFE_GLOBALS``."""
_TAGS: tuple[str, ...] = ("__tensor__", "__ndarray__", "__float__", "__tuple__", "__dict__")
_TAGS += ("__dtype__", "__device__", "__npscalar__", "__sharded__")

ShardedHook = Callable[[object, str], Mapping[str, JSON]]
"""Called by ``flatten`` for a sharded leaf with its key; returns the JSON entry's fields."""

ShardedReader = Callable[[dict[str, object]], object]
"""Called by ``unflatten`` with a sharded entry as read; returns what the tree holds there."""


class SavedTensor(Protocol):
    """What ``unflatten`` places for a saved tensor: a ``torch.Tensor``, or a stand-in that
    reads it later (``unread.Unread``); an ndarray entry is its ``numpy()``."""

    def numpy(self) -> object: ...


_WRITE_FIXES = {
    errno.ENOSPC: "the filesystem is full: make room on it (or save to another one), then "
    "save again",
    errno.EDQUOT: "your disk quota there is used up: free space within it or have it raised "
    "(or save elsewhere), then save again",
    errno.EROFS: "that filesystem is mounted read-only: save to a folder on a writable one "
    "(project_dir, or the folder passed to save_state)",
    errno.EACCES: "this process may not write in that folder: give it write permission "
    "(chmod/chown) or save to a folder it owns",
    errno.EPERM: "this process may not write in that folder: give it write permission "
    "(chmod/chown) or save to a folder it owns",
    errno.EFBIG: "the file is larger than the filesystem or `ulimit -f` allows: raise the "
    "limit or save to another filesystem",
}
"""The fix for each kind of failed write; others get the general one."""


def write_fix(exc: BaseException) -> str:
    """What to do about a failed write, told by its errno."""
    code = exc.errno if isinstance(exc, OSError) else None
    return _WRITE_FIXES.get(
        code if code is not None else -1,
        "check that the filesystem has room and that this process may write there, then save again",
    )


@contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Turn a failed write (disk full, quota, read-only filesystem, no permission...) into a
    CheckpointError that names ``path`` and the fix for that fault, whatever layer raised it."""
    try:
        yield
    except CheckpointError:
        raise
    except (OSError, SafetensorError) as exc:
        reason: object = exc
        if isinstance(exc, OSError) and exc.strerror:  # without the path: it is named below
            reason = f"[Errno {exc.errno}] {exc.strerror}"
        raise CheckpointError(
            f"{what}: could not write {path}: {reason}\n  fix: {write_fix(exc)}"
        ) from exc


def write_json(path: Path, data: object, *, what: str = "checkpoint") -> None:
    """Strict JSON (no NaN literals), flushed to disk."""
    text = json.dumps(data, indent=1, sort_keys=False, allow_nan=False)
    with writing(path, what), open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def read_json(path: Path) -> object:
    """The JSON value in ``path``, unchecked (a damaged file may hold anything)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"cannot read {path}: {exc}\n  fix: the checkpoint is damaged; load another one"
        ) from exc


def is_dtensor(obj: object) -> TypeGuard[DTensor]:
    """A ``torch.distributed.tensor.DTensor``."""
    # Without that module imported no DTensor exists; importing it here would cost seconds.
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(obj, module.DTensor)


class _Flattener:
    def __init__(
        self, what: str, sharded: ShardedHook | None = None, sharded_types: tuple[type, ...] = ()
    ) -> None:
        self.what = what
        self.sharded = sharded
        self.sharded_types = sharded_types
        self.tensors: dict[str, torch.Tensor] = {}
        self._names: set[str] = set()
        self._storages: set[int] = set()

    def name_for(self, path: list[object]) -> str:
        """The leaf's path joined by '/', made unique; tensors and sharded entries share it."""
        base = "/".join(str(p) for p in path) or "root"
        name, n = base, 1
        while name in self._names:
            name, n = f"{base}#{n}", n + 1
        self._names.add(name)
        return name

    def add_sharded(self, t: object, path: list[object]) -> dict[str, JSON]:
        if self.sharded is None:
            raise CheckpointError(
                f"{self.what} at {_where(path)} is a DTensor (sharded over processes), which "
                "a single-file save cannot hold\n  fix: save it with "
                "overdrive.checkpoint.shards.save_shards (or a sharded strategy's save)"
            )
        key = self.name_for(path)
        return {"__sharded__": key, **self.sharded(t, key)}

    def add_tensor(self, t: torch.Tensor, path: list[object]) -> str:
        if t.is_sparse or t.layout != torch.strided:
            raise CheckpointError(
                f"{self.what} at {_where(path)} is a {t.layout} tensor, which safetensors "
                "cannot hold\n  fix: convert it to a dense tensor in state_dict()"
            )
        t = t.detach().cpu()
        storage = t.untyped_storage()
        # safetensors refuses tensors that share memory; copies make each one stand alone.
        if (
            storage.data_ptr() in self._storages
            or storage.nbytes() != t.numel() * t.element_size()
            or not t.is_contiguous()
        ):
            t = t.contiguous().clone()
        if t.numel():
            self._storages.add(t.untyped_storage().data_ptr())
        name = self.name_for(path)
        self.tensors[name] = t
        return name

    def encode(self, obj: object, path: list[object]) -> JSON:
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"__float__": repr(obj)}
        if is_dtensor(obj) or isinstance(obj, self.sharded_types):
            return self.add_sharded(obj, path)
        if isinstance(obj, torch.Tensor):
            return {"__tensor__": self.add_tensor(obj, path)}
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                raise self.unsupported(obj, path)
            return {"__ndarray__": self.add_tensor(torch.from_numpy(obj.copy()), path)}
        if isinstance(obj, np.generic):
            return {"__npscalar__": obj.dtype.str, "value": self.encode(obj.item(), path)}
        if isinstance(obj, torch.dtype):
            return {"__dtype__": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.device):
            return {"__device__": str(obj)}
        if isinstance(obj, Mapping):
            keys = list(obj.keys())
            if all(isinstance(k, str) and not k.startswith("__") for k in keys):
                return {k: self.encode(obj[k], [*path, k]) for k in keys}
            return {
                "__dict__": [
                    [self.encode(k, [*path, "key"]), self.encode(v, [*path, k])]
                    for k, v in obj.items()
                ]
            }
        if isinstance(obj, tuple):  # torch.Size included
            return {"__tuple__": [self.encode(v, [*path, i]) for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self.encode(v, [*path, i]) for i, v in enumerate(obj)]
        raise self.unsupported(obj, path)

    def unsupported(self, obj: object, path: list[object]) -> CheckpointError:
        return CheckpointError(
            f"{self.what} at {_where(path)} is a {type(obj).__qualname__}, which cannot be "
            "saved without pickle\n  fix: make state_dict() return only tensors, numbers, "
            "strings, lists and dicts"
        )


def _where(path: list[object]) -> str:
    return "state_dict()" + "".join(f"[{p!r}]" for p in path)


def flatten(
    obj: object,
    *,
    what: str,
    sharded: ShardedHook | None = None,
    sharded_types: tuple[type, ...] = (),
) -> tuple[JSON, dict[str, torch.Tensor]]:
    """(JSON-able structure, tensors by name) for a state tree; ``what`` names it in errors.

    A DTensor leaf (or an instance of ``sharded_types``) becomes ``{"__sharded__": key,
    **sharded(leaf, key)}`` (an error without ``sharded``); its key is its path, unique
    among all of the tree's names.
    """
    f = _Flattener(what, sharded, sharded_types)
    return f.encode(obj, []), f.tensors


def unflatten(
    structure: object,
    tensors: Mapping[str, SavedTensor],
    *,
    what: str,
    sharded: ShardedReader | None = None,
) -> object:
    """The state tree that ``flatten`` took apart; ``sharded`` rebuilds sharded entries."""
    return _Decoder(tensors, what, sharded).decode(structure)


class _Decoder:
    # A class, not a nested recursive function: that would be a reference cycle holding
    # every loaded tensor (a whole checkpoint) in memory until the garbage collector ran.
    def __init__(
        self,
        tensors: Mapping[str, SavedTensor],
        what: str,
        sharded: ShardedReader | None = None,
    ) -> None:
        self.tensors, self.what, self.sharded = tensors, what, sharded

    def tensor(self, name: str) -> SavedTensor:
        if name not in self.tensors:
            raise CheckpointError(
                f"{self.what}: tensor {name!r} is named in the structure but missing from "
                "the tensor file\n  fix: the checkpoint is damaged; load another one"
            )
        return self.tensors[name]

    def decode(self, obj: object) -> object:
        decode = self.decode
        if isinstance(obj, list):
            return [decode(v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        tag = next((t for t in _TAGS if t in obj), None)
        if tag == "__tensor__":
            return self.tensor(obj[tag])
        if tag == "__ndarray__":
            return self.tensor(obj[tag]).numpy()
        if tag == "__float__":
            return float(obj[tag])
        if tag == "__tuple__":
            return tuple(decode(v) for v in obj[tag])
        if tag == "__dict__":
            return {_hashable(decode(k)): decode(v) for k, v in obj[tag]}
        if tag == "__dtype__":
            return getattr(torch, obj[tag])
        if tag == "__device__":
            return torch.device(obj[tag])
        if tag == "__npscalar__":
            dtype: np.dtype[np.generic] = np.dtype(obj[tag])
            return dtype.type(decode(obj["value"]))
        if tag == "__sharded__":
            if self.sharded is None:
                raise CheckpointError(
                    f"{self.what}: entry {obj[tag]!r} is sharded over several files, which a "
                    "single-file load cannot read\n  fix: load it with "
                    "overdrive.checkpoint.shards.load_shards"
                )
            return self.sharded(obj)
        return {k: decode(v) for k, v in obj.items()}


def _hashable(key: object) -> object:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def save_tree(
    obj: object,
    directory: Path,
    stem: str,
    *,
    what: str,
    checksums: dict[Path, FileRecord] | None = None,
) -> list[str]:
    """Write ``stem.json`` (+ ``stem.safetensors`` when there are tensors); the file names.
    ``checksums`` receives the tensor file's record (``integrity.checksum``'s), by path."""
    structure, tensors = flatten(obj, what=what)
    written = [f"{stem}.json"]
    if tensors:
        path = directory / f"{stem}.safetensors"
        with writing(path, what):
            record = write_safetensors(tensors, path, {"format": "pt"})
        if checksums is not None:
            checksums[path] = record
        written.append(f"{stem}.safetensors")
    write_json(
        directory / f"{stem}.json", {"tensors": bool(tensors), "state": structure}, what=what
    )
    return written


def load_tensors(path: Path, *, what: str) -> dict[str, torch.Tensor]:
    """A safetensors file as a dict on CPU, with a clear error if it is not one."""
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{what}: {path} is not a readable safetensors file ({exc})\n"
            "  fix: the checkpoint is damaged or was replaced; load another one"
        ) from exc


def load_tree(
    directory: Path, stem: str, *, what: str, allow_unsafe_pickle: bool = False
) -> object:
    """Read what ``save_tree`` wrote; a legacy pickle file only with ``allow_unsafe_pickle``."""
    meta_path = directory / f"{stem}.json"
    if not meta_path.exists():
        legacy = [directory / f"{stem}{s}" for s in PICKLE_SUFFIXES]
        found = next((p for p in legacy if p.exists()), None)
        if found is None:
            raise CheckpointError(
                f"{what}: {meta_path} is missing\n  fix: the checkpoint is incomplete; "
                "load another one"
            )
        return load_pickle(found, what=what, allow_unsafe_pickle=allow_unsafe_pickle)
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or "state" not in meta:
        raise CheckpointError(f"{what}: {meta_path} is not an overdrive state file")
    tensors: dict[str, torch.Tensor] = {}
    if meta.get("tensors"):
        tensors = load_tensors(directory / f"{stem}.safetensors", what=what)
    return unflatten(meta["state"], tensors, what=what)


def load_pickle(path: Path, *, what: str, allow_unsafe_pickle: bool) -> Any:
    """torch.load of a trusted legacy file; refused unless the caller opted in by name.
    Whatever the pickle held, untyped: it is handed to ``load_state_dict`` as it is."""
    if not allow_unsafe_pickle:
        raise UnsafeCheckpointError(
            f"{what}: {path} is a pickle file, and unpickling runs whatever code the file "
            "contains, so overdrive does not load it by default\n"
            "  fix: if you made this file yourself and trust it, pass "
            "allow_unsafe_pickle=True to load_state"
        )
    return torch.load(path, map_location="cpu", weights_only=False)


def load_weights_only(
    f: Any,
    map_location: Any = None,
    *,
    allowed: Iterable[Any] = WEIGHTS_ONLY_GLOBALS,
    **kwargs: Any,
) -> Any:
    """``torch.load`` with ``weights_only=True`` unless ``kwargs`` say otherwise: tensors,
    plain containers and the ``allowed`` globals are rebuilt, no other pickled object, and no
    code from the file runs. ``allowed`` applies to this call only."""
    kwargs.setdefault("weights_only", True)
    with torch.serialization.safe_globals(list(allowed)):
        return torch.load(f, map_location=map_location, **kwargs)
