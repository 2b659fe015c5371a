"""A state saved whole, read as a sharded layout needs it: each process reads only its box of
every tensor, keys can change before anything is read, and a missing file is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from overdrive.checkpoint import shard_reader
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.serialization import save_tree
from overdrive.checkpoint.shards import LocalShard
from overdrive.checkpoint.unread import Unread, load_unread, read_like


def _saved(tmp_path: Path) -> dict:
    state = {
        "weight": torch.arange(40, dtype=torch.float32).reshape(10, 4),
        "bias": torch.arange(10, dtype=torch.float64),
        "step": torch.tensor(3.0),
        "lr": 0.5,
        "pairs": (torch.ones(2, dtype=torch.int64), [1, 2]),
    }
    save_tree(state, tmp_path, "model_0", what="model 0")
    return state


def test_every_tensor_starts_unread_with_its_shape_and_dtype(tmp_path: Path) -> None:
    state = _saved(tmp_path)
    tree = load_unread(tmp_path, "model_0", what="model 0", sharded=False)
    assert isinstance(tree["weight"], Unread) and tree["lr"] == 0.5
    assert tree["weight"].shape == (10, 4) and tree["bias"].dtype == torch.float64
    assert isinstance(tree["pairs"], tuple) and tree["pairs"][1] == [1, 2]
    whole = read_like(tree, None)  # no layout: every tensor whole
    for key in ("weight", "bias", "step"):
        assert torch.equal(whole[key], state[key]) and whole[key].dtype == state[key].dtype
    assert torch.equal(whole["pairs"][0], state["pairs"][0])


def test_a_box_template_reads_only_its_rows(tmp_path: Path, monkeypatch) -> None:
    state = _saved(tmp_path)
    read: list[int] = []
    original = shard_reader.OpenFiles.read

    def counted(self, chunk, box):
        out = original(self, chunk, box)
        read.append(out.numel())
        return out

    monkeypatch.setattr(shard_reader.OpenFiles, "read", counted)
    tree = load_unread(tmp_path, "model_0", what="model 0", sharded=False)
    template = {
        "weight": LocalShard(torch.empty(3, 4), (10, 4), (4, 0)),  # rows 4..6
        "bias": LocalShard(torch.empty(10, dtype=torch.float64, device="meta"), (10,), (0,)),
    }
    mine = read_like({"weight": tree["weight"], "bias": tree["bias"]}, template)
    assert torch.equal(mine["weight"], state["weight"][4:7])
    assert mine["bias"] is None  # another stage's tensor: a placeholder, nothing read
    assert read == [12]  # 3 rows of 4, not the 40 elements of the whole weight


def test_keys_change_before_anything_is_read(tmp_path: Path) -> None:
    state = _saved(tmp_path)
    tree = load_unread(tmp_path, "model_0", what="model 0", sharded=False)
    renamed = {"layer.weight": tree["weight"]}  # as optimizer_keys.convert renames entries
    template = {"layer.weight": LocalShard(torch.empty(5, 4), (10, 4), (5, 0))}
    assert torch.equal(read_like(renamed, template)["layer.weight"], state["weight"][5:])


def test_a_shape_or_dtype_unlike_this_run_is_refused_by_name(tmp_path: Path) -> None:
    _saved(tmp_path)
    tree = load_unread(tmp_path, "model_0", what="model 0", sharded=False)
    wrong_shape = {"weight": LocalShard(torch.empty(2, 4), (12, 4), (0, 0))}
    with pytest.raises(CheckpointError, match=r"'weight' was saved with shape \(10, 4\)"):
        read_like({"weight": tree["weight"]}, wrong_shape)
    wrong_dtype = {"weight": LocalShard(torch.empty(2, 4, dtype=torch.bfloat16), (10, 4), (0, 0))}
    with pytest.raises(CheckpointError, match="stored as torch.float32.*loading does not cast"):
        read_like({"weight": tree["weight"]}, wrong_dtype)


def test_a_missing_state_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"model_0\.json is missing"):
        load_unread(tmp_path, "model_0", what="model 0", sharded=False)
