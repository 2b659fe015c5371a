"""Write a safetensors file fast: several writers at once, past the page cache, checksummed.

The format (an 8-byte little-endian header length, a JSON header of names, dtypes, shapes and
byte offsets, then the raw bytes) is written here so the data can go out through positional
writes from several threads: one writer is bound by copying into the page cache, well under
what the disk takes. Large files are written with ``O_DIRECT`` through aligned buffers: on
the machine measured (bench/RESULTS.md, "checkpoint save speed") buffered writes of a few GB
were throttled to a fraction of the disk's speed by the kernel's dirty-page accounting,
direct ones were not. The file's CRC-32 is computed from the bytes as they are written (per
chunk, combined in order), so the integrity manifest needs no second pass over the file.
Files read back with ``safetensors.safe_open`` / ``load_file``.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import json
import os
import struct
import threading
import zlib
from collections.abc import Mapping
from pathlib import Path

import torch

from overdrive.checkpoint.crc import combine
from overdrive.checkpoint.records import FileRecord

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
DTYPE_OF_NAME = {name: dtype for dtype, name in DTYPES.items()}
"""The torch dtype of each safetensors dtype name overdrive writes."""
CHUNK = 8 << 20  # bytes per write call
WRITERS = 8  # threads, each with one write in flight: the disk sees a deeper queue
ALIGN = 4096  # O_DIRECT: buffer address, file offset and length in whole blocks
DIRECT_MIN = 64 << 20  # smaller files go through the page cache
_DIRECT = getattr(os, "O_DIRECT", 0)


def safetensors_size(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None
) -> int:
    """The size in bytes of the file ``write_safetensors`` makes of ``tensors``, from their
    shapes and dtypes alone (the tensors need hold no data)."""
    return len(_header(tensors, metadata)) + sum(
        t.numel() * t.element_size() for t in tensors.values()
    )


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
    direct: bool | None = None,
) -> FileRecord:
    """Write ``tensors`` (contiguous, on the CPU) to ``path`` in safetensors format; returns
    the file's ``{"size", "crc32"}`` (``integrity.checksum``'s record), computed from the
    bytes as they are written.

    The file is cut into ``CHUNK``-sized pieces that ``writers`` threads write with
    positional writes (which, like the CRC and the copies, release the GIL). ``direct``:
    write with ``O_DIRECT`` (past the page cache) through aligned buffers; by default for
    files of at least ``DIRECT_MIN`` bytes where the platform has it, and a filesystem that
    refuses it gets buffered writes. The file is not synced here: the checkpoint commit
    syncs it.
    """
    for name, t in tensors.items():
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"{name}: only contiguous CPU tensors can be written")
    header = _header(tensors, metadata)
    pieces = [torch.frombuffer(bytearray(header), dtype=torch.uint8)]
    pieces += [_raw(t) for t in tensors.values() if t.numel()]
    size = sum(p.numel() for p in pieces)
    if direct is None:
        direct = size >= DIRECT_MIN
    if direct and _DIRECT and CHUNK % ALIGN == 0:
        try:
            return _write(path, pieces, size, writers, direct=True)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this filesystem refuses O_DIRECT
                raise
    return _write(path, pieces, size, writers, direct=False)


def _raw(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as a flat uint8 tensor over the same memory."""
    return t.detach().reshape(-1).view(torch.uint8)


def _chunk(
    pieces: list[torch.Tensor], offsets: list[int], start: int, end: int
) -> list[torch.Tensor]:
    """The parts of ``pieces``, laid end to end from ``offsets``, between file offsets
    ``start`` and ``end``."""
    out = []
    i = bisect.bisect_right(offsets, start) - 1
    while i < len(pieces) and offsets[i] < end:
        lo, hi = max(start, offsets[i]), min(end, offsets[i + 1])
        if lo < hi:
            out.append(pieces[i][lo - offsets[i] : hi - offsets[i]])
        i += 1
    return out


def _bytes(t: torch.Tensor) -> memoryview:
    return t.numpy().data.cast("B")  # ndarray.data: the memoryview over the array's memory


def _write(
    path: str | Path, pieces: list[torch.Tensor], size: int, writers: int, *, direct: bool
) -> FileRecord:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (_DIRECT if direct else 0)
    fd = os.open(path, flags, 0o644)
    try:
        bounds = [(s, min(size, s + CHUNK)) for s in range(0, size, CHUNK)]
        offsets = list(itertools.accumulate((p.numel() for p in pieces), initial=0))
        crcs: dict[int, int] = {}
        errors: list[BaseException] = []

        def run(share: list[tuple[int, int]]) -> None:
            buffer = _aligned(CHUNK) if direct else None
            try:
                for start, end in share:
                    parts = _chunk(pieces, offsets, start, end)
                    if buffer is None:
                        crcs[start] = _put(fd, start, parts)
                    else:
                        crcs[start] = _put_direct(fd, start, parts, buffer)
                    if errors:
                        return
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)

        count = max(1, min(writers, len(bounds)))
        if count == 1:
            run(bounds)
        else:
            threads = [
                threading.Thread(target=run, args=(bounds[i::count],), name=f"overdrive-write-{i}")
                for i in range(count)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if errors:
            raise errors[0]
        if direct and size % ALIGN:
            os.ftruncate(fd, size)  # the last block was written whole
    finally:
        os.close(fd)
    total = 0
    for start, end in bounds:
        total = combine(total, crcs[start], end - start)
    return {"size": size, "crc32": f"{total:08x}"}


def _put(fd: int, start: int, parts: list[torch.Tensor]) -> int:
    """Write ``parts`` end to end from file offset ``start``, straight from their memory;
    their CRC-32."""
    crc = 0
    for part in parts:
        data = _bytes(part)
        _pwrite_all(fd, start, data)
        crc = zlib.crc32(data, crc)
        start += len(data)
    return crc


def _put_direct(fd: int, start: int, parts: list[torch.Tensor], buffer: torch.Tensor) -> int:
    """Write ``parts`` end to end from file offset ``start`` (a multiple of ``ALIGN``) through
    the aligned ``buffer``, in whole blocks (the caller truncates the file to its size);
    their CRC-32."""
    length = 0
    for part in parts:
        buffer[length : length + part.numel()].copy_(part)
        length += part.numel()
    data = _bytes(buffer)
    _pwrite_all(fd, start, data[: -(-length // ALIGN) * ALIGN])
    return zlib.crc32(data[:length])


def _aligned(nbytes: int) -> torch.Tensor:
    """A ``nbytes`` uint8 buffer starting on an ``ALIGN`` boundary (as O_DIRECT needs)."""
    raw = torch.empty(nbytes + ALIGN, dtype=torch.uint8)
    skip = -raw.data_ptr() % ALIGN
    return raw[skip : skip + nbytes]


def _pwrite_all(fd: int, position: int, data: memoryview) -> None:
    while len(data):
        written = os.pwrite(fd, data, position)
        position += written
        data = data[written:]
