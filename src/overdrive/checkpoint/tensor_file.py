"""Write a safetensors file fast: straight from tensor memory, several writers at once.

The format (an 8-byte little-endian header length, a JSON header of names, dtypes, shapes and
byte offsets, then the raw bytes) is written here so the data can go out through positional
writes from several threads: one writer is bound by copying into the page cache, well under
what the disk takes. Files read back with ``safetensors.safe_open`` / ``load_file``.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
    torch.uint16: "U16",
    torch.uint32: "U32",
    torch.uint64: "U64",
}
CHUNK = 8 << 20  # bytes per write call
WRITERS = 4


def _raw(t: torch.Tensor) -> memoryview:
    """A tensor's bytes without a copy (it must be contiguous and on the CPU)."""
    if t.numel() == 0:
        return memoryview(b"")
    flat = t.reshape(-1) if t.dim() == 0 else t
    array: Any = flat.view(torch.uint8).numpy()
    return memoryview(array).cast("B")


def _header(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None) -> bytes:
    entries: dict[str, object] = {}
    if metadata:
        entries["__metadata__"] = dict(metadata)
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in DTYPES:
            raise ValueError(f"{name}: dtype {t.dtype} cannot be stored in safetensors")
        size = t.numel() * t.element_size()
        entries[name] = {
            "dtype": DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text


def write_safetensors(
    tensors: Mapping[str, torch.Tensor],
    path: str | Path,
    metadata: Mapping[str, str] | None = None,
    *,
    writers: int = WRITERS,
) -> None:
    """Write ``tensors`` (contiguous, on the CPU) to ``path`` in safetensors format.

    Data goes out in ``CHUNK``-sized positional writes shared by ``writers`` threads (the
    writes release the GIL). The file is not synced here: the checkpoint commit syncs it.
    """
    for name, t in tensors.items():
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"{name}: only contiguous CPU tensors can be written")
    header = _header(tensors, metadata)
    jobs: list[tuple[int, memoryview]] = []
    offset = len(header)
    for t in tensors.values():
        data = _raw(t)
        for start in range(0, len(data), CHUNK):
            jobs.append((offset + start, data[start : start + CHUNK]))
        offset += len(data)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _pwrite_all(fd, 0, memoryview(header))
        if len(jobs) <= 1 or writers <= 1:
            for position, data in jobs:
                _pwrite_all(fd, position, data)
        else:
            _write_in_threads(fd, jobs, writers)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, position: int, data: memoryview) -> None:
    while len(data):
        written = os.pwrite(fd, data, position)
        position += written
        data = data[written:]


def _write_in_threads(fd: int, jobs: list[tuple[int, memoryview]], writers: int) -> None:
    errors: list[BaseException] = []

    def run(share: list[tuple[int, memoryview]]) -> None:
        try:
            for position, data in share:
                _pwrite_all(fd, position, data)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(jobs[i::writers],), name=f"overdrive-write-{i}")
        for i in range(min(writers, len(jobs)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
