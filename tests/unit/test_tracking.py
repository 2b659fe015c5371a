"""Tracker selection, errors, the no-op tracker, and the JSON-lines tracker end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import overdrive.tracking as tracking
from overdrive.accelerator import Accelerator
from overdrive.tracking import NoOpTracker, TrackerError, requested, start_trackers


def _fake(log_with: Any, *, main: bool = True, project_dir: str | None = None) -> Any:
    return SimpleNamespace(
        settings={"log_with": log_with},
        state=SimpleNamespace(is_main_process=main),
        project_configuration=SimpleNamespace(project_dir=project_dir, logging_dir=None),
    )


def test_all_means_every_installed_tracker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracking, "is_installed", lambda name: name in ("jsonl", "mlflow"))
    assert requested("all") == ["jsonl", "mlflow"]
    assert requested(["jsonl", "all"]) == ["jsonl", "mlflow"]
    assert requested(None) == []


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(
        tracking.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "wandb" else real(name, *a),
    )
    with pytest.raises(TrackerError, match=r"pip install 'overdrive\[wandb\]'"):
        start_trackers(_fake(["jsonl", "wandb"], project_dir="p"), "demo")


def test_unknown_tracker_and_missing_directory_are_errors() -> None:
    with pytest.raises(TrackerError, match="'comet'.*not a tracker"):
        start_trackers(_fake(["comet"]), "demo")
    with pytest.raises(TrackerError, match="neither logging_dir nor project_dir"):
        start_trackers(_fake(["jsonl"]), "demo")


def test_other_processes_get_no_op_trackers(tmp_path: Path) -> None:
    trackers = start_trackers(_fake(["jsonl"], main=False, project_dir=str(tmp_path)), "demo")
    assert [type(t) for t in trackers] == [NoOpTracker]
    (tracker,) = trackers
    assert tracker.name == "jsonl"
    tracker.log({"loss": 1.0}, step=1)
    tracker.tracker.log_artifact("x").anything()  # the run stand-in accepts any call
    tracker.finish()
    assert list(tmp_path.iterdir()) == []


def test_jsonl_through_the_accelerator(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True, log_with="jsonl", project_dir=str(tmp_path))
    acc.init_trackers("exp", config={"lr": 0.1, "betas": (0.9, 0.99)})
    acc.log({"loss": torch.tensor(0.25), "acc": np.float32(0.5), "note": "hi"}, step=3)
    acc.log({"loss": 0.125}, step=4)
    run = acc.get_tracker("jsonl", unwrap=True)
    assert run.path == tmp_path / "logs" / "exp" / "metrics.jsonl"
    acc.end_training()
    records = [json.loads(line) for line in run.path.read_text().splitlines()]
    assert [(r["step"], r["values"]) for r in records] == [
        (3, {"loss": 0.25, "acc": 0.5, "note": "hi"}),
        (4, {"loss": 0.125}),
    ]
    config = json.loads((run.path.parent / "config.json").read_text())
    assert config == {"lr": 0.1, "betas": [0.9, 0.99]}


def test_trackers_are_imported_only_when_requested() -> None:
    code = (
        "import sys, overdrive, overdrive.accelerator, overdrive.tracking;"
        "heavy = [m for m in ('tensorboard', 'torch.utils.tensorboard', 'wandb', 'mlflow',"
        " 'overdrive.checkpoint', 'overdrive.tracking.wandb') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_custom_tracker_instance_in_log_with() -> None:
    class Memory(tracking.Tracker):
        name = "memory"

        def __init__(self) -> None:
            super().__init__("demo", None)
            self.rows: list[tuple[int | None, dict[str, Any]]] = []

        def log(self, values: dict[str, Any], step: int | None = None, **kw: Any) -> None:
            self.rows.append((step, values))

    mine = Memory()
    acc = Accelerator(cpu=True, log_with=[mine])
    acc.init_trackers("demo")
    acc.log({"loss": 1.0}, step=2)
    assert acc.get_tracker("memory") is mine and mine.rows == [(2, {"loss": 1.0})]
