"""save_model: Hugging Face file layout that plain safetensors loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from overdrive.accelerator import Accelerator
from overdrive.checkpoint import CheckpointError
from overdrive.checkpoint.model_files import parse_size


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_single_file_loads_into_a_fresh_model(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    model = acc.prepare(_model())
    acc.save_model(model, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model.safetensors"]
    fresh = _model()
    fresh.load_state_dict(load_file(str(tmp_path / "out" / "model.safetensors")), strict=True)
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)


def test_shards_with_index_and_stale_files_removed(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    model = acc.prepare(_model())
    out = tmp_path / "out"
    # Tensors of 2048, 128, 512 and 16 bytes: the 2048 one alone exceeds 600 bytes.
    acc.save_model(model, out, max_shard_size=600)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    state = {}
    for name in files:
        shard = load_file(str(out / name))
        size = sum(t.numel() * 4 for t in shard.values())
        assert size <= 600 or len(shard) == 1
        state.update(shard)
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in state.values())
    fresh = _model()
    fresh.load_state_dict(state, strict=True)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    acc.save_model(model, out)  # unsharded now: the old shards and index go
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def test_tied_weights_are_saved_once(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    acc.save_model(acc.prepare(model), tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert list(state) == ["0.weight"]
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert json.loads(f.metadata()["tied_weights"]) == {"1.weight": "0.weight"}


def test_pickle_format_only_when_asked(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    acc.save_model(acc.prepare(_model()), tmp_path, safe_serialization=False)
    assert [p.name for p in tmp_path.iterdir()] == ["pytorch_model.bin"]


def test_shard_sizes_parse() -> None:
    assert parse_size("10GB") == 10**10
    assert parse_size("500MiB") == 500 * 2**20
    assert parse_size("1.5kb") == 1500
    assert parse_size(123) == 123
    with pytest.raises(CheckpointError, match="max_shard_size='lots' is not a size"):
        parse_size("lots")
