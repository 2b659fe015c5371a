"""The fast safetensors writer: files that safetensors itself reads back exactly."""

from __future__ import annotations

from pathlib import Path

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
