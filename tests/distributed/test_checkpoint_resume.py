"""Exact resume across process groups, rotation, a save killed midway, a one-rank save.

Three launches of scripts/ckpt_resume.py (2 CPU processes, fp16 loss scaling, shuffled
data, gradient accumulation 2) share one project directory; see the script's docstring.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.dist import free_port, run_launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

PHASES = ("full", "resume", "recover")


def _port_clash(result: subprocess.CompletedProcess[str]) -> bool:
    text = (result.stdout + result.stderr).lower()
    return "address already in use" in text or "eaddrinuse" in text


def _files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


def _launch(out: Path, phase: str) -> subprocess.CompletedProcess[str]:
    """One phase on a port the OS just handed out (not the shared default 29500 that
    concurrently running test runs race for). A port taken between the check and the
    bind fails before any worker starts: that, and only that (nothing written), is retried.
    """
    for _ in range(3):
        before = _files(out)
        result = run_launch(
            "ckpt_resume.py",
            args=["--out", str(out), "--phase", phase],
            # fp16 loss scaling on CPU processes, whose scaler state the checkpoint carries
            launch_args=["--main_process_port", str(free_port()), "--fp16_on_cpu", "true"],
        )
        if not (_port_clash(result) and _files(out) == before):
            break
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ckpt_resume")
    results: dict[str, Any] = {}
    for phase in PHASES:
        results[phase] = _launch(out, phase)
        if phase == "full":
            assert results[phase].returncode == 0, _output(results)
    return {"out": out, **results}


def _output(runs: dict[str, Any]) -> str:
    """Every launch's output, for the failure message."""
    parts = []
    for phase in PHASES:
        if phase in runs:
            r = runs[phase]
            parts.append(
                f"=== {phase}: exit {r.returncode} ===\n--- stdout ---\n{r.stdout}\n"
                f"--- stderr ---\n{r.stderr}"
            )
    return "\n".join(parts)


def _read(runs: dict[str, Any], name: str) -> Any:
    """A file a phase wrote (JSON or torch); a missing one fails with every launch's output."""
    path = runs["out"] / name
    assert path.exists(), f"{name} was not written\n{_output(runs)}"
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return torch.load(path, weights_only=True)


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


def test_resumed_run_matches_uninterrupted_run_bitwise(runs: dict[str, Any]) -> None:
    resume = runs["resume"]
    assert "rank 1 failed (killed by SIGKILL" in resume.stderr + resume.stdout, _output(runs)
    for rank in (0, 1):
        full, resumed = _read(runs, f"full_{rank}.pt"), _read(runs, f"resume_{rank}.pt")
        assert _read(runs, f"resume_start_{rank}.json") == 9
        # Batches 10..15: the rest of epoch 1 (mid-epoch resume), then epoch 2's shuffle.
        assert resumed["seen"] == full["seen"][9:]
        assert len(full["seen"]) == 15
        _assert_same(full, resumed)
    first, second = _read(runs, "full_0.pt")["seen"], _read(runs, "full_1.pt")["seen"]
    assert first != second  # each process saw its own shard
    assert first[:6] != first[6:12]  # and a new shuffle each epoch


def test_rotation_keeps_the_newest_after_a_resume(runs: dict[str, Any]) -> None:
    assert _read(runs, "dirs_after_full.json") == ["checkpoint_1", "checkpoint_2"]
    assert _read(runs, "dirs_after_resume.json") == ["checkpoint_2", "checkpoint_3"]


def test_killed_save_leaves_previous_checkpoint_loadable(runs: dict[str, Any]) -> None:
    for rank in (0, 1):
        assert _read(runs, f"recover_start_{rank}.json") == 12
        full, recovered = _read(runs, f"full_{rank}.pt"), _read(runs, f"recover_{rank}.pt")
        assert recovered["seen"] == full["seen"][12:]
        _assert_same(full, recovered)
    # The next save takes the killed one's number and clears its leftovers.
    listing = _read(runs, "dirs_after_recover.json")
    assert listing == ["checkpoint_3", "checkpoint_4"], _output(runs)


def test_save_on_the_main_process_alone_completes_under_ddp(runs: dict[str, Any]) -> None:
    recover = runs["recover"]
    assert recover.returncode == 0, _output(runs)
    # checkpoint_5 came from process 0 alone: rotation kept the newest two.
    assert _read(runs, "dirs_after_alone.json") == ["checkpoint_4", "checkpoint_5"]
