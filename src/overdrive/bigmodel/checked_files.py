"""Weight files read lazily, forward after forward (offload ``.dat`` files, the safetensors
files an offload index points into), read with plain file reads into memory, never through a
memory map: a file truncated under a map kills the process with SIGBUS, and one changed under
it gives wrong numbers. Before and after each read the file is checked against what it was
when opened (the same file at that path, its size and modification time, and for safetensors
its header), so a truncated, rewritten or replaced file is a clear error naming it.
"""

from __future__ import annotations

import json
import os
from typing import TypedDict

import torch

from overdrive.errors import OverdriveError

PathLike = str | os.PathLike[str]
_HEADER_LIMIT = 100 * 1024 * 1024  # safetensors' own bound on a header's length

# safetensors' dtype names, for those this torch has.
_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, attr)
    for name, attr in {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U64": "uint64",
        "U32": "uint32",
        "U16": "uint16",
        "U8": "uint8",
        "BOOL": "bool",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
        "C64": "complex64",
    }.items()
    if hasattr(torch, attr)
}


class _Entry(TypedDict):
    """One tensor of a safetensors header."""

    dtype: str
    shape: list[int]
    data_offsets: list[int]  # [begin, end) after the header


class WeightFileError(OverdriveError, OSError):
    """A weights file read lazily is not what it was when opened (truncated, rewritten,
    replaced, removed), or never was a valid file of its format."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(
            f"{path}: {problem}; the weights read from it would be wrong\n"
            "  fix: leave offload and checkpoint files untouched while a model reads them "
            "(they are read again at every forward), or load the model again from intact files"
        )


class CheckedFile:
    """A file open for plain reads; ``read`` checks it is still the file that was opened."""

    _fd = -1  # until opened: closing a file that failed to open does nothing

    def __init__(self, path: PathLike) -> None:
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        info = os.fstat(self._fd)
        self.size = info.st_size
        self._identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)

    def check(self) -> None:
        """Raise ``WeightFileError`` unless the path still holds the file as it was opened."""
        self._check_unchanged()

    def _check_unchanged(self) -> None:
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            raise WeightFileError(self.path, "the file was removed since it was opened") from None
        opened = os.fstat(self._fd)
        if (now.st_dev, now.st_ino) != self._identity[:2]:
            raise WeightFileError(self.path, "the file was replaced by another since it was opened")
        if opened.st_size != self.size:
            raise WeightFileError(
                self.path,
                f"the file is now {opened.st_size} bytes long, it was {self.size} when opened "
                "(truncated or extended)",
            )
        if opened.st_mtime_ns != self._identity[3]:
            raise WeightFileError(self.path, "the file was written to since it was opened")

    def read(self, offset: int, length: int) -> torch.Tensor:
        """``length`` bytes from ``offset`` as a uint8 tensor, the file checked before and
        after (read straight into the tensor's memory: no second copy)."""
        self.check()
        data = torch.empty(length, dtype=torch.uint8)
        view = memoryview(data.numpy().data) if length else memoryview(b"")
        done = 0
        while done < length:
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got == 0:
                raise WeightFileError(
                    self.path,
                    f"the file ends at byte {offset + done}, before byte {offset + length}",
                )
            done += got
        self._check_unchanged()
        return data

    def close(self) -> None:
        """Close the file (reads after this fail)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def _tensor(data: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if not data.numel():
        return torch.empty(shape, dtype=dtype)
    return data.view(dtype).reshape(shape)


class SafetensorsFile(CheckedFile):
    """A safetensors file read by plain reads (what overdrive needs of ``safe_open``); its
    header is read again and compared before each tensor is read."""

    def __init__(self, path: PathLike) -> None:
        super().__init__(path)
        if self.size < 8:
            raise WeightFileError(
                self.path, f"{self.size} bytes is too short for a safetensors file"
            )
        length = int.from_bytes(self.read(0, 8).numpy().tobytes(), "little")
        if length > _HEADER_LIMIT or 8 + length > self.size:
            raise WeightFileError(
                self.path,
                f"its safetensors header claims {length} bytes, the file holds {self.size - 8} "
                "after the length (incomplete metadata: truncated, or not a safetensors file)",
            )
        self._header = self.read(8, length).numpy().tobytes()
        try:
            header = json.loads(self._header)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise WeightFileError(
                self.path, f"its safetensors header is not JSON ({error})"
            ) from None
        self._metadata: dict[str, str] | None = header.pop("__metadata__", None)
        self._entries: dict[str, _Entry] = header
        self._start = 8 + length
        end = max((int(e["data_offsets"][1]) for e in header.values()), default=0)
        if self._start + end > self.size:
            raise WeightFileError(
                self.path,
                f"its header describes {end} bytes of tensor data, the file holds "
                f"{self.size - self._start} (truncated)",
            )

    def check(self) -> None:
        super().check()
        header = getattr(self, "_header", None)
        if header is not None and bytes(self._pread(8, len(header))) != header:
            raise WeightFileError(self.path, "its safetensors header changed since it was opened")

    def _pread(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def keys(self) -> list[str]:
        """The names of the tensors, in the header's order."""
        return list(self._entries)

    def metadata(self) -> dict[str, str] | None:
        """The header's ``__metadata__`` (None when it has none)."""
        return self._metadata

    def get_tensor(self, name: str) -> torch.Tensor:
        """Tensor ``name``, read into memory."""
        entry = self._entries.get(name)
        if entry is None:
            raise KeyError(f"{self.path} holds no tensor named {name!r}")
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None:
            raise WeightFileError(
                self.path, f"tensor {name!r} has dtype {entry['dtype']}, unknown here"
            )
        begin, end = (int(x) for x in entry["data_offsets"])
        shape = tuple(int(d) for d in entry["shape"])
        return _tensor(self.read(self._start + begin, end - begin), dtype, shape)


def is_safetensors(path: PathLike) -> bool:
    """Whether ``path`` begins as a safetensors file does (a little-endian header length, then
    ``{``): what tells a safetensors ``.dat`` from a raw one when the index does not say."""
    with open(path, "rb") as handle:
        start = handle.read(9)
    if len(start) < 9 or start[8:9] != b"{":
        return False
    return int.from_bytes(start[:8], "little") <= _HEADER_LIMIT


def read_raw(path: PathLike, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """A bare array file (Hugging Face Accelerate's ``.dat``: the values and nothing else) of
    ``dtype`` and ``shape``, refused unless it is exactly that many bytes."""
    count = max(1, int(torch.Size(shape).numel()))
    want = count * torch.empty((), dtype=dtype).element_size()
    handle = CheckedFile(path)
    try:
        if handle.size != want:
            raise WeightFileError(
                handle.path,
                f"a raw {dtype} array of shape {list(shape)} is {want} bytes, the file is "
                f"{handle.size}",
            )
        flat = _tensor(handle.read(0, want), dtype, (count,))
    finally:
        handle.close()
    return flat[0].clone() if shape == () else flat.view(shape)
