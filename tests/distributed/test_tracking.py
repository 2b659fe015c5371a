"""Every installed tracker, 2 processes: the real files hold process 0's values at the right
steps, and nothing from process 1 (which logged different values)."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dist import assert_ok, run_launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

OPTIONAL = ("tensorboard", "mlflow", "wandb")
INSTALLED = ["jsonl", *(n for n in OPTIONAL if importlib.util.find_spec(n) is not None)]
LOSS = [(step, 0.5 * step) for step in range(5)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("track")
    result = run_launch(
        "track_all.py",
        args=["--out", str(out), "--trackers", ",".join(INSTALLED)],
        env={"WANDB_SILENT": "true"},
    )
    assert_ok(result)
    return {"out": out, "logs": out / "project", "result": result}


def test_only_process_0_gets_real_trackers(run: dict[str, Any]) -> None:
    main = json.loads((run["out"] / "trackers_0.json").read_text())
    other = json.loads((run["out"] / "trackers_1.json").read_text())
    assert set(main) == set(other) == set(INSTALLED)
    assert not any(t["noop"] for t in main.values())
    assert all(t["noop"] and t["run"] == "_NoOpRun" for t in other.values())


def test_jsonl_holds_the_values_at_their_steps(run: dict[str, Any]) -> None:
    lines = (run["logs"] / "demo" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["step"], r["values"]["loss"]) for r in records] == LOSS
    config = json.loads((run["logs"] / "demo" / "config.json").read_text())
    effective = config.pop("overdrive_settings")  # the settings in force, with their sources
    assert effective["num_processes"] == {"value": 2, "source": "flag --num_processes"}
    assert config == {"lr": 0.01, "layers": [4, 2], "optimizer": {"name": "adamw"}}


@pytest.mark.skipif("tensorboard" not in INSTALLED, reason="tensorboard not installed")
def test_tensorboard_event_file_holds_the_scalars(run: dict[str, Any]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir = run["logs"] / "demo"
    assert len(list(log_dir.glob("events.out.tfevents.*"))) == 1
    events = EventAccumulator(str(log_dir))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == LOSS
    assert [e.step for e in events.Scalars("lr")] == [0, 1, 2, 3, 4]


@pytest.mark.skipif("mlflow" not in INSTALLED, reason="mlflow not installed")
def test_mlflow_store_holds_the_metrics_and_params(run: dict[str, Any]) -> None:
    # The default store is MLflow's local SQLite file; read it with the stdlib.
    db = sqlite3.connect(run["logs"] / "mlflow.db")
    try:
        runs = db.execute("SELECT run_uuid, status FROM runs").fetchall()
        assert len(runs) == 1 and runs[0][1] == "FINISHED"
        rows = db.execute(
            "SELECT step, value FROM metrics WHERE key = 'loss' ORDER BY step"
        ).fetchall()
        assert rows == LOSS
        params = dict(db.execute("SELECT key, value FROM params").fetchall())
        assert params.pop("overdrive_settings.num_processes.source") == "flag --num_processes"
        params = {k: v for k, v in params.items() if not k.startswith("overdrive_settings.")}
        assert params == {"lr": "0.01", "layers": "[4, 2]", "optimizer.name": "adamw"}
    finally:
        db.close()


@pytest.mark.skipif("wandb" not in INSTALLED, reason="wandb not installed")
def test_wandb_offline_writes_one_run_directory(run: dict[str, Any]) -> None:
    runs = list((run["logs"] / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    data = b"".join(p.read_bytes() for p in runs[0].glob("*.wandb"))
    assert b"loss" in data and b"lr" in data


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_nothing_else_is_written(run: dict[str, Any]) -> None:
    files = [f for f in _files(run["logs"]) if not f.startswith("wandb/")]
    expected = {"demo/metrics.jsonl", "demo/config.json"}
    if "mlflow" in INSTALLED:
        expected.add("mlflow.db")
    assert expected <= set(files)
    assert len([f for f in files if "tfevents" in f]) == ("tensorboard" in INSTALLED)
