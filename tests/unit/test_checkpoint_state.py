"""save_state/load_state on one process: round trip, strict mismatches, unsafe files."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import DataLoaderConfiguration, ProjectConfiguration
from overdrive.accelerator import Accelerator
from overdrive.checkpoint import (
    MANIFEST,
    CheckpointError,
    CheckpointMismatchError,
    UnsafeCheckpointError,
)


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = state["n"]


def _setup(project: Path | None = None, scheduler: bool = True, counter: bool = True) -> dict:
    torch.manual_seed(0)
    config = None
    if project is not None:
        config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    # These tests check overdrive's exact resume (the loader continues mid-epoch): asked for.
    exact = DataLoaderConfiguration(exact_resume=True)
    acc = Accelerator(cpu=True, project_config=config, dataloader_config=exact)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = TensorDataset(torch.randn(8, 3), torch.arange(8))
    objs = [model, opt, DataLoader(data, batch_size=2, shuffle=True)]
    if scheduler:
        objs.append(torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5))
    prepared = acc.prepare(*objs)
    out = {"acc": acc, "model": prepared[0], "opt": prepared[1], "dl": prepared[2]}
    if scheduler:
        out["sched"] = prepared[3]
    if counter:
        out["counter"] = Counter()
        acc.register_for_checkpointing(out["counter"])
    return out


def _train(s: dict, batches: int, save_after: int | None = None) -> list[list[int]]:
    """Train ``batches`` batches (saving after ``save_after``); the sample ids seen."""
    seen = []
    for x, ids in s["dl"]:
        s["acc"].backward(s["model"](x).sum())
        s["opt"].step()
        if "sched" in s:
            s["sched"].step()
        s["opt"].zero_grad()
        seen.append(ids.tolist())
        if "counter" in s:
            s["counter"].n += 1
        if len(seen) == save_after:
            s["path"] = s["acc"].save_state()
        if len(seen) == batches:
            break
    return seen


@pytest.fixture
def saved(tmp_path: Path) -> dict:
    s = _setup(tmp_path / "proj")
    s["after"] = _train(s, 4, save_after=2)[2:]
    return s


def test_round_trip_restores_every_part(saved: dict, tmp_path: Path) -> None:
    path = saved["path"]
    assert path == tmp_path / "proj" / "checkpoints" / "checkpoint_0"
    manifest = json.loads((path / MANIFEST).read_text())
    assert [p["file"] for p in manifest["parts"]] == [
        "model_0",
        "optimizer_0",
        "scheduler_0",
        "custom_object_0",
    ]
    fresh = _setup(tmp_path / "proj")
    fresh["acc"].load_state()  # newest complete
    assert fresh["counter"].n == 2
    assert fresh["sched"].scheduler.last_epoch == 2
    assert fresh["acc"].project_configuration.iteration == 1
    assert _train(fresh, 2) == saved["after"]
    for a, b in zip(saved["model"].parameters(), fresh["model"].parameters()):
        assert torch.equal(a, b)
    assert fresh["acc"].save_state().name == "checkpoint_1"


def test_load_before_prepare_is_an_error() -> None:
    acc = Accelerator(cpu=True)
    with pytest.raises(CheckpointError, match=r"(?s)before anything was prepared.*prepare\("):
        acc.load_state("anywhere")


def test_save_without_a_directory_says_how_to_name_one() -> None:
    s = _setup()
    with pytest.raises(CheckpointError, match="automatic_checkpoint_naming=True"):
        s["acc"].save_state()
    with pytest.raises(CheckpointError, match="no project_dir"):
        s["acc"].load_state()


def test_extra_part_in_checkpoint_is_named(saved: dict, tmp_path: Path) -> None:
    fresh = _setup(tmp_path / "other", scheduler=False)
    before = [p.clone() for p in fresh["model"].parameters()]
    with pytest.raises(CheckpointMismatchError, match=r"holds scheduler 0 \(StepLR\)") as info:
        fresh["acc"].load_state(saved["path"])
    assert len(info.value.problems) == 1
    # Nothing was restored: the mismatch is found before any part is loaded.
    assert all(torch.equal(a, b) for a, b in zip(before, fresh["model"].parameters()))


def test_missing_part_in_checkpoint_is_named(saved: dict, tmp_path: Path) -> None:
    fresh = _setup(tmp_path / "other")
    fresh["acc"].register_for_checkpointing(Counter())
    with pytest.raises(CheckpointMismatchError, match=r"custom object 1 \(Counter\).*holds none"):
        fresh["acc"].load_state(saved["path"])


def test_other_world_size_is_said_and_missing_file_named(saved: dict, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(saved["path"], copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps({**manifest, "world_size": 2}))
    fresh = _setup(tmp_path / "other")
    # Full model and optimizer state fit any world size; what cannot follow is said.
    with pytest.warns(UserWarning, match=r"saved by 2 process\(es\) and is resumed by 1"):
        fresh["acc"].load_state(copy)
    (copy / MANIFEST).write_text(json.dumps(manifest))
    (copy / "optimizer_0.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"optimizer 0 \(SGD\).*optimizer_0.safetensors"):
        fresh["acc"].load_state(copy)


def test_incomplete_checkpoint_is_refused(saved: dict) -> None:
    (saved["path"] / MANIFEST).unlink()
    with pytest.raises(CheckpointError, match="no completion marker"):
        saved["acc"].load_state(saved["path"])
    with pytest.raises(CheckpointError, match="no complete checkpoint under"):
        saved["acc"].load_state()


class _Payload:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_crafted_pickle_is_never_executed(saved: dict, tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    evil = pickle.dumps(_Payload(marker))
    # 1. A checkpoint in Hugging Face Accelerate's pickle layout.
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("pytorch_model.bin", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"):
        (legacy / name).write_bytes(evil)
    (legacy / "custom_checkpoint_0.pkl").write_bytes(evil)
    # Read as Accelerate reads it (weights_only): the payload is refused, never called.
    with pytest.raises(UnsafeCheckpointError, match=r"(?s)model 0: .*allow_unsafe_pickle=True"):
        saved["acc"].load_state(legacy)
    # 2. A pickle put in place of one of our tensor files, and one beside them.
    (saved["path"] / "model_0.safetensors").write_bytes(evil)
    (saved["path"] / "optimizer_0.bin").write_bytes(evil)
    # Refused by its checksum record before anything reads it.
    with pytest.raises(CheckpointError, match=r"model 0 \(Linear\): .*model_0.safetensors has"):
        saved["acc"].load_state(saved["path"])
    assert not marker.exists()


def test_explicit_directory_is_replaced_whole(saved: dict, tmp_path: Path) -> None:
    target = tmp_path / "mine"
    assert saved["acc"].save_state(target) == target
    saved["counter"].n = 99
    saved["acc"].save_state(target)
    assert json.loads((target / "custom_object_0.json").read_text())["state"] == {"n": 99}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_trusted_legacy_layout_loads_with_opt_in(tmp_path: Path) -> None:
    import random

    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    model, opt, sched = acc.prepare(model, opt, sched)
    counter = Counter()
    acc.register_for_checkpointing(counter)
    source = torch.nn.Linear(3, 2)
    torch.save(source.state_dict(), tmp_path / "pytorch_model.bin")
    torch.save(opt.optimizer.state_dict(), tmp_path / "optimizer.bin")
    torch.save({**sched.scheduler.state_dict(), "last_epoch": 5}, tmp_path / "scheduler.bin")
    torch.save({"n": 7}, tmp_path / "custom_checkpoint_0.pkl")
    random.seed(3)
    torch.save({"random_state": random.getstate()}, tmp_path / "random_states_0.pkl")
    expected = random.random()
    acc.load_state(tmp_path, allow_unsafe_pickle=True)
    assert torch.equal(model.weight, source.weight)
    assert sched.scheduler.last_epoch == 5 and counter.n == 7
    assert random.random() == expected


def test_missing_directory_is_named_with_the_fix(saved: dict, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(
        CheckpointError,
        match=r"nope does not exist\n  fix: load_state\(.*checkpoint_0'\) loads the newest",
    ):
        saved["acc"].load_state(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="file is not a directory"):
        saved["acc"].load_state(tmp_path / "file")
    # A save over an explicit directory killed between its two renames: the old one is kept.
    target = tmp_path / "mine"
    saved["acc"].save_state(target)
    target.rename(tmp_path / ".mine.old")
    with pytest.raises(CheckpointError, match=r"intact in .*\.mine\.old; rename it back"):
        saved["acc"].load_state(target)
    saved["acc"].save_state(target)  # the next save clears the leftover
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_every_random_stream_is_restored(saved: dict, tmp_path: Path) -> None:
    import random

    import numpy as np

    path = saved["acc"].save_state(tmp_path / "rng")
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    saved["acc"].load_state(path)
    assert random.random() == expected[0]
    assert np.random.rand() == expected[1]
    assert torch.equal(torch.rand(1), expected[2])
