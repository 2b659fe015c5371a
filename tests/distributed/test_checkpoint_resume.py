"""Exact resume across process groups, rotation, a save killed midway, a one-rank save.

Three launches of scripts/ckpt_resume.py (2 CPU processes, fp16 loss scaling, shuffled
data, gradient accumulation 2) share one project directory; see the script's docstring.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.dist import assert_ok, run_launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ckpt_resume")
    results = {}
    for phase in ("full", "resume", "recover"):
        results[phase] = run_launch("ckpt_resume.py", args=["--out", str(out), "--phase", phase])
        if phase == "full":
            assert_ok(results[phase])
    return {"out": out, **results}


def _load(out: Path, name: str) -> dict[str, Any]:
    return torch.load(out / name, weights_only=True)  # type: ignore[no-any-return]


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key, value in a["params"].items():
        assert torch.equal(value, b["params"][key]), key
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and sa
    for index, state in sa.items():
        for name, value in state.items():
            assert torch.equal(value, sb[index][name]), (index, name)
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert a["scheduler"] == b["scheduler"]
    assert a["precision"] == b["precision"] and a["precision"]["scale"] > 0


def _output(result: Any) -> str:
    return f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def test_resumed_run_matches_uninterrupted_run_bitwise(runs: dict[str, Any]) -> None:
    out = runs["out"]
    resume = runs["resume"]
    assert (out / "resume_0.pt").exists(), _output(resume)
    assert "rank 1 failed (killed by SIGKILL" in resume.stderr + resume.stdout, _output(resume)
    for rank in (0, 1):
        full, resumed = _load(out, f"full_{rank}.pt"), _load(out, f"resume_{rank}.pt")
        assert json.loads((out / f"resume_start_{rank}.json").read_text()) == 9
        # Batches 10..15: the rest of epoch 1 (mid-epoch resume), then epoch 2's shuffle.
        assert resumed["seen"] == full["seen"][9:]
        assert len(full["seen"]) == 15
        _assert_same(full, resumed)
    first, second = _load(out, "full_0.pt")["seen"], _load(out, "full_1.pt")["seen"]
    assert first != second  # each process saw its own shard
    assert first[:6] != first[6:12]  # and a new shuffle each epoch


def test_rotation_keeps_the_newest_after_a_resume(runs: dict[str, Any]) -> None:
    out = runs["out"]
    assert json.loads((out / "dirs_after_full.json").read_text()) == [
        "checkpoint_1",
        "checkpoint_2",
    ]
    assert json.loads((out / "dirs_after_resume.json").read_text()) == [
        "checkpoint_2",
        "checkpoint_3",
    ]


def test_killed_save_leaves_previous_checkpoint_loadable(runs: dict[str, Any]) -> None:
    out, recover = runs["out"], runs["recover"]
    for rank in (0, 1):
        assert json.loads((out / f"recover_start_{rank}.json").read_text()) == 12
        full, recovered = _load(out, f"full_{rank}.pt"), _load(out, f"recover_{rank}.pt")
        assert recovered["seen"] == full["seen"][12:]
        _assert_same(full, recovered)
    # The next save takes the killed one's number and clears its leftovers.
    listing = json.loads((out / "dirs_after_recover.json").read_text())
    assert listing == ["checkpoint_3", "checkpoint_4"], recover.stderr


def test_save_on_one_process_fails_naming_the_missing_one(runs: dict[str, Any]) -> None:
    recover = runs["recover"]
    assert recover.returncode != 0
    text = recover.stderr + recover.stdout
    assert "CollectiveTimeoutError" in text
    assert "process(es) [1] did not call save_state" in text
