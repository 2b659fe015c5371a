"""Sharded DTensor state saved by 2 and by 4 processes, loaded back by 2, 3, 4 and by one
plain process (no group), and merged into full weights; see scripts/shards_roundtrip.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from overdrive.checkpoint import CheckpointError
from overdrive.checkpoint.shards import load_shards, merge_full
from overdrive.cli.main import main
from tests.helpers.dist import SCRIPTS, free_port, result_rows, run_launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

_spec = importlib.util.spec_from_file_location("shards_roundtrip", SCRIPTS / "shards_roundtrip.py")
assert _spec is not None and _spec.loader is not None
script: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)
BUF = torch.tensor([7.0, 8.0, 9.0])


def _launch(nprocs: int, *args: str) -> subprocess.CompletedProcess[str]:
    port = ["--main_process_port", str(free_port())]
    return run_launch("shards_roundtrip.py", nprocs=nprocs, args=args, launch_args=port)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("shards")
    done = {"out": out}
    done["save2"] = _launch(2, "--save", str(out / "w2"))
    done["save4"] = _launch(4, "--save", str(out / "w4"))
    done["load3"] = _launch(3, "--load", str(out / "w2"), "--load", str(out / "w4"))
    return done


def _rows(runs: dict[str, Any], name: str, nprocs: int) -> list[dict[str, Any]]:
    run = runs[name]
    text = f"{name}: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert run.returncode == 0, text
    rows = result_rows(run.stdout)
    assert [r["rank"] for r in rows] == list(range(nprocs)), text
    return rows


@pytest.mark.parametrize(("name", "nprocs"), [("save2", 2), ("save4", 4)])
def test_round_trip_in_the_saving_layout(runs: dict[str, Any], name: str, nprocs: int) -> None:
    for row in _rows(runs, name, nprocs):
        assert row["mismatches"] == [] and row["checked"] == 11, row
        assert row["single_file_error"].startswith(
            "model 0 at state_dict()['w'] is a DTensor (sharded over processes)"
        ), row


def test_saved_by_2_and_by_4_loads_onto_3_processes(runs: dict[str, Any]) -> None:
    for row in _rows(runs, "load3", 3):
        assert row["mismatches"] == [] and row["checked"] == 22, row


def _chunk_keys(directory: Path, stem: str, rank: int) -> set[str]:
    table = json.loads((directory / f"{stem}.rank{rank}.json").read_text())
    return {c["key"] for c in table["chunks"]}


def test_each_box_is_written_by_one_process(runs: dict[str, Any]) -> None:
    _rows(runs, "save4", 4)
    w4 = runs["out"] / "w4"
    # Mesh (2, 2): ranks 0, 1 sit at replicate coordinate 0 and write h; r (fully
    # replicated) comes from rank 0; b (5 over 4: 2, 2, 1, 0) has no box on rank 3.
    want = [{"w", "b", "g", "h", "r"}, {"w", "b", "g", "h"}, {"w", "b", "g"}, {"w", "g"}]
    assert [_chunk_keys(w4, "model_0", r) for r in range(4)] == want
    assert _chunk_keys(w4, "optimizer_0", 3) == {"state/w/exp_avg", "state/g/exp_avg"}
    assert "buf" in load_file(str(w4 / "model_0.rank0.safetensors"))
    assert "buf" not in load_file(str(w4 / "model_0.rank1.safetensors"))


def test_one_plain_process_reads_full_tensors(runs: dict[str, Any]) -> None:
    _rows(runs, "save2", 2)
    for saved in ("w2", "w4"):
        model = load_shards(runs["out"] / saved, "model_0", what="model 0")
        assert model.keys() == {*script.expected(), "buf"}
        for key, value in {**script.expected(), "buf": BUF}.items():
            assert model[key].dtype == value.dtype and torch.equal(model[key], value), key
        optim = load_shards(runs["out"] / saved, "optimizer_0", what="optimizer 0")
        want = script.expected_optimizer()
        assert optim["param_groups"] == want["param_groups"]
        for name, state in want["state"].items():
            assert torch.equal(optim["state"][name]["exp_avg"], state["exp_avg"]), name
            assert torch.equal(optim["state"][name]["step"], state["step"]), name


def test_merge_weights_of_a_4_process_save(runs: dict[str, Any], tmp_path: Path) -> None:
    _rows(runs, "save4", 4)
    ckpt = tmp_path / "checkpoint_0"
    shutil.copytree(runs["out"] / "w4", ckpt)
    part = {"kind": "model", "index": 0, "file": "model_0", "class": "Net", "sharded": True}
    manifest = {"format": "overdrive-checkpoint", "version": 1, "parts": [part]}
    (ckpt / "overdrive_checkpoint.json").write_text(json.dumps(manifest))
    assert main(["merge-weights", str(ckpt), str(tmp_path / "hf")]) == 0
    merged = load_file(str(tmp_path / "hf" / "model.safetensors"))
    want = {**script.expected(), "buf": BUF}
    assert merged.keys() == want.keys()
    assert all(torch.equal(merged[k], v) and merged[k].dtype == v.dtype for k, v in want.items())


def test_a_missing_piece_of_a_real_save_is_named(runs: dict[str, Any], tmp_path: Path) -> None:
    _rows(runs, "save4", 4)
    copy = tmp_path / "w4"
    shutil.copytree(runs["out"] / "w4", copy)
    (copy / "model_0.rank2.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model_0\.rank2\.safetensors is not a readable"):
        merge_full(copy, "model_0")
    (copy / "model_0.rank2.json").unlink()
    with pytest.raises(CheckpointError, match=r"4 process\(es\), but model_0\.rank2\.json missing"):
        merge_full(copy, "model_0")
