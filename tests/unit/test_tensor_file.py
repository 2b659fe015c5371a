"""The fast safetensors writer: files that safetensors itself reads back exactly."""

from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from overdrive.checkpoint import tensor_file
from overdrive.checkpoint.tensor_file import write_safetensors


def _sample() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(33, 7, generator=g),
        "half": torch.randn(5, generator=g).half(),
        "bf": torch.randn(4, 3, generator=g).bfloat16(),
        "step": torch.tensor(7.0),  # a scalar
        "ids": torch.arange(10, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
        "f8": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
    }


@pytest.mark.parametrize("writers", [1, 4])
def test_safetensors_reads_back_every_dtype_exactly(
    tmp_path: Path, writers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tensor_file, "CHUNK", 64)  # many chunks: the threads share them
    tensors = _sample()
    path = tmp_path / "t.safetensors"
    write_safetensors(tensors, path, {"format": "pt"}, writers=writers)
    loaded = load_file(path)
    assert sorted(loaded) == sorted(tensors)
    for name, t in tensors.items():
        assert loaded[name].dtype == t.dtype and loaded[name].shape == t.shape
        raw = loaded[name].reshape(-1).view(torch.uint8)
        assert torch.equal(raw, t.reshape(-1).view(torch.uint8))
    with safe_open(path, framework="pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_non_contiguous_or_unsupported_tensors_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="contiguous"):
        write_safetensors({"t": torch.randn(4, 4).t()}, tmp_path / "a")
    with pytest.raises(ValueError, match="complex64"):
        write_safetensors({"c": torch.zeros(2, dtype=torch.complex64)}, tmp_path / "b")


def _large() -> dict[str, torch.Tensor]:
    """Tensors whose bytes cross chunk boundaries at odd offsets."""
    g = torch.Generator().manual_seed(1)
    return {
        "a": torch.randn(1000, 11, generator=g),
        "b": torch.arange(3001, dtype=torch.int16),
        "c": torch.randn(2500, generator=g).double(),
        "s": torch.tensor(3, dtype=torch.int8),
    }


@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("writers", [1, 3])
def test_the_returned_checksum_is_the_crc32_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool, writers: int
) -> None:
    monkeypatch.setattr(tensor_file, "CHUNK", 2 * tensor_file.ALIGN)  # 8+ chunks, a short last
    opened: list[int] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any) -> int:
        opened.append(flags)
        return real_open(path, flags, *args)

    monkeypatch.setattr(tensor_file.os, "open", spy)
    tensors = _large()
    path = tmp_path / "t.safetensors"
    record = write_safetensors(tensors, path, writers=writers, direct=direct)
    data = path.read_bytes()
    assert record == {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    assert len(data) > 8 * tensor_file.CHUNK and len(data) % tensor_file.ALIGN
    loaded = load_file(path)
    assert all(torch.equal(loaded[k], t) for k, t in tensors.items())
    o_direct = getattr(os, "O_DIRECT", 0)
    assert bool(opened[0] & o_direct) == (direct and bool(o_direct))
    assert opened[1:] in ([], [opened[0] & ~o_direct])  # refused: written again, buffered


def test_a_filesystem_refusing_direct_writes_gets_buffered_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this platform")
    monkeypatch.setattr(tensor_file, "CHUNK", tensor_file.ALIGN)
    real_pwrite = os.pwrite
    direct_fds: set[int] = set()
    tried: list[int] = []
    real_open = os.open

    def open_(path: Any, flags: int, *args: Any) -> int:
        fd = real_open(path, flags, *args)
        if flags & os.O_DIRECT:
            direct_fds.add(fd)
            tried.append(fd)
        else:
            direct_fds.discard(fd)  # a number the closed direct fd had
        return fd

    def pwrite(fd: int, data: Any, position: int) -> int:
        if fd in direct_fds:  # as a filesystem without O_DIRECT support answers
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, position)

    monkeypatch.setattr(tensor_file.os, "open", open_)
    monkeypatch.setattr(tensor_file.os, "pwrite", pwrite)
    path = tmp_path / "t.safetensors"
    record = write_safetensors(_large(), path, writers=2, direct=True)
    assert tried
    data = path.read_bytes()
    assert record == {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    assert sorted(load_file(path)) == sorted(_large())


def test_other_write_errors_are_raised_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def pwrite(fd: int, data: Any, position: int) -> int:
        calls.append(position)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tensor_file.os, "pwrite", pwrite)
    with pytest.raises(OSError, match="No space"):
        write_safetensors(_large(), tmp_path / "t.safetensors", writers=1, direct=True)
    assert len(calls) == 1
