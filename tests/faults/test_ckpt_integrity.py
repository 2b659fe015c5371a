"""Damaged checkpoint files are refused by name, before anything is restored; a stored dtype
that differs from the object's is an error, not a silent cast.

One process, in this process: the damage is done to the files on disk after a save.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive.accelerator import Accelerator
from overdrive.checkpoint import (
    MANIFEST,
    CheckpointError,
    CheckpointMismatchError,
    integrity,
    tensor_file,
)


def _setup(half: bool = False) -> dict[str, Any]:
    torch.manual_seed(0)
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(4, 3)
    if half:
        model = model.to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2, shuffle=True)
    model, opt, data = acc.prepare(model, opt, data)
    return {"acc": acc, "model": model, "opt": opt, "data": data}


def _train_and_save(s: dict[str, Any], path: Path, batches: int = 3) -> Path:
    """``batches`` batches (an odd number: the save is inside an accumulation window)."""
    for i, (x,) in enumerate(s["data"]):
        with s["acc"].accumulate(s["model"]):
            s["acc"].backward(s["model"](x.to(s["model"].weight.dtype)).float().pow(2).mean())
            s["opt"].step()
            s["opt"].zero_grad()
        if i + 1 == batches:
            break
    return s["acc"].save_state(path)


def _weights(s: dict[str, Any]) -> list[torch.Tensor]:
    return [p.detach().clone() for p in s["model"].parameters()]


def _flip_byte_in_tensor_data(path: Path) -> None:
    """Change one byte of a weight's value, leaving the safetensors header valid."""
    data = bytearray(path.read_bytes())
    header = struct.unpack("<Q", data[:8])[0]
    data[8 + header + 5] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return _train_and_save(_setup(), tmp_path / "ckpt")


def test_every_file_is_recorded_with_size_and_checksum(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    files = manifest["files"]
    on_disk = sorted(p.relative_to(saved).as_posix() for p in saved.rglob("*") if p.is_file())
    assert sorted(files) == [f for f in on_disk if f != MANIFEST]
    assert "rank_0/state.safetensors" in files  # the open window's gradients
    assert files == integrity.record(saved)
    for name, entry in files.items():
        assert entry["size"] == (saved / name).stat().st_size
    integrity.verify(saved, files)  # intact: no error


def test_a_flipped_byte_in_a_weight_is_refused_naming_the_file(saved: Path) -> None:
    target = saved / "model_0.safetensors"
    _flip_byte_in_tensor_data(target)
    fresh = _setup()
    before = _weights(fresh)
    with pytest.raises(CheckpointError) as info:
        fresh["acc"].load_state(saved)
    message = str(info.value)
    assert f"checkpoint {saved} is damaged" in message
    assert f"model 0 (Linear): {target} does not hold the bytes that were written" in message
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(fresh)))  # nothing restored


def test_tensor_files_are_checksummed_while_written_and_damage_is_still_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every tensor file written with O_DIRECT, in several chunks and a padded last block.
    monkeypatch.setattr(tensor_file, "DIRECT_MIN", 0)
    monkeypatch.setattr(tensor_file, "CHUNK", tensor_file.ALIGN)
    read_again: list[str] = []
    real_checksums = integrity.checksums

    def spy(paths: Iterable[Path]) -> dict[Path, integrity.FileRecord]:
        paths = list(paths)
        read_again.extend(p.name for p in paths)
        return real_checksums(paths)

    monkeypatch.setattr(integrity, "checksums", spy)
    saved = _train_and_save(_setup(), tmp_path / "ckpt")
    assert read_again and not [n for n in read_again if n.endswith(".safetensors")]
    files = json.loads((saved / MANIFEST).read_text())["files"]
    assert files == integrity.record(saved)  # read back: the same sizes and CRCs
    target = saved / "optimizer_0.safetensors"
    _flip_byte_in_tensor_data(target)
    with pytest.raises(CheckpointError, match="is damaged") as info:
        _setup()["acc"].load_state(saved)
    assert f"{target} does not hold the bytes that were written" in str(info.value)


@pytest.mark.parametrize(
    "damage",
    ["optimizer_0.safetensors", "rank_0/state.safetensors", "optimizer_0.json", "truncated"],
)
def test_any_damaged_file_is_refused(saved: Path, damage: str) -> None:
    if damage == "truncated":
        target = saved / "model_0.safetensors"
        target.write_bytes(target.read_bytes()[:-4])
        expected = "has"
    elif damage.endswith(".json"):
        target = saved / damage
        # Still valid JSON with the same length: only the checksum can tell.
        text = target.read_text()
        assert '"lr": 0.1' in text
        target.write_text(text.replace('"lr": 0.1', '"lr": 0.9'))
        expected = "does not hold the bytes"
    else:
        target = saved / damage
        _flip_byte_in_tensor_data(target)
        expected = "does not hold the bytes"
    fresh = _setup()
    with pytest.raises(CheckpointError, match="is damaged") as info:
        fresh["acc"].load_state(saved)
    assert f"{target} {expected}" in str(info.value)


def test_a_stored_dtype_other_than_the_model_s_is_an_error(tmp_path: Path) -> None:
    saved = _train_and_save(_setup(half=True), tmp_path / "bf16")
    fresh = _setup(half=False)  # the same model in float32
    before = _weights(fresh)
    with pytest.raises(CheckpointMismatchError) as info:
        fresh["acc"].load_state(saved)
    message = str(info.value)
    assert "model 0 (Linear): weight is stored as torch.bfloat16, the model's is torch.float32" in (
        message
    )
    assert "state 'exp_avg' of parameter 0 is stored as torch.bfloat16" in message
    assert "the accumulated gradient of weight is stored as torch.bfloat16" in message
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(fresh)))
    # The same dtypes load.
    _setup(half=True)["acc"].load_state(saved)
