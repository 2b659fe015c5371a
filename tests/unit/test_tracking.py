"""Tracker selection, errors, the no-op tracker, and the JSON-lines tracker end to end."""

from __future__ import annotations

import json
import os
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
    assert run.path == tmp_path / "exp" / "metrics.jsonl"
    acc.end_training()
    records = [json.loads(line) for line in run.path.read_text().splitlines()]
    assert [(r["step"], r["values"]) for r in records] == [
        (3, {"loss": 0.25, "acc": 0.5, "note": "hi"}),
        (4, {"loss": 0.125}),
    ]
    config = json.loads((run.path.parent / "config.json").read_text())
    recorded = config.pop("overdrive_settings")  # the effective settings come along
    assert recorded["use_cpu"] == {"value": True, "source": "code Accelerator(cpu=...)"}
    assert config == {"lr": 0.1, "betas": [0.9, 0.99]}


def test_trackers_are_imported_only_when_requested() -> None:
    # The tracker classes themselves load with overdrive.tracking (LOGGER_TYPE_TO_CLASS names
    # them); the packages they drive load only when a run starts.
    code = (
        "import sys, overdrive, overdrive.accelerator, overdrive.tracking;"
        "heavy = [m for m in ('tensorboard', 'torch.utils.tensorboard', 'wandb', 'mlflow',"
        " 'overdrive.checkpoint') if m in sys.modules];"
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


@pytest.fixture
def no_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_", "MLFLOW_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))


def _jsonl_steps(acc: Accelerator) -> list[int]:
    path = acc.get_tracker("jsonl", unwrap=True).path
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_log_with_from_env_and_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_config: None
) -> None:
    monkeypatch.setenv("ACCELERATE_LOG_WITH", "jsonl")
    from_env = Accelerator(cpu=True, project_dir=str(tmp_path / "env"))
    from_env.init_trackers("exp")
    from_env.log({"loss": 1.0}, step=7)
    assert _jsonl_steps(from_env) == [7]
    from_env.end_training()
    monkeypatch.delenv("ACCELERATE_LOG_WITH")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("log_with: jsonl\n")
    from_file = Accelerator(cpu=True, project_dir=str(tmp_path / "file"), config_file=str(cfg))
    from_file.init_trackers("exp")
    from_file.log({"loss": 2.0}, step=8)
    assert _jsonl_steps(from_file) == [8]
    from_file.end_training()


def test_end_training_twice_and_log_after_it(tmp_path: Path, no_config: None) -> None:
    names = ["jsonl", "tensorboard"]
    acc = Accelerator(cpu=True, log_with=names, project_dir=str(tmp_path))
    acc.init_trackers("exp")
    acc.log({"loss": 1.0}, step=0)
    acc.end_training()
    acc.end_training()  # idempotent
    with pytest.raises(TrackerError, match="after end_training"):
        acc.log({"loss": 2.0}, step=1)
    other = NoOpTracker("jsonl")  # what the other processes hold: the same error
    other.finish()
    other.finish()
    with pytest.raises(TrackerError, match="jsonl tracker after end_training"):
        other.log({"loss": 2.0}, step=1)
    assert _jsonl_steps(acc) == [0]
    first = acc.get_tracker("jsonl")
    acc.init_trackers("exp")  # a new run, after end_training or not
    acc.log({"loss": 3.0}, step=2)
    second = acc.get_tracker("jsonl")
    acc.init_trackers("exp2")
    assert first.finished and second.finished and not acc.get_tracker("jsonl").finished
    assert _jsonl_steps(acc) == []
    acc.end_training()


@pytest.mark.parametrize(
    ("uri", "file_store"),
    [("file:///tmp/mlruns", True), ("mlruns", True), ("C:\\runs", True)]
    + [("sqlite:///x.db", False), ("http://host:5000", False), ("databricks", False)],
)
def test_file_store_uris(uri: str, file_store: bool) -> None:
    from overdrive.tracking.mlflow import is_file_store

    assert is_file_store(uri) is file_store


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SQLAlchemy, inside MLflow
def test_mlflow_file_store_on_request(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_config: None
) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "x")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # absent now, and again after the test
    acc = Accelerator(cpu=True, log_with="mlflow", project_dir=str(tmp_path))
    with pytest.raises(TrackerError, match="'ftp' is not a local MLflow store"):
        acc.init_trackers("exp", init_kwargs={"mlflow": {"store": "ftp"}})
    acc.init_trackers("exp", config={"lr": 0.5}, init_kwargs={"mlflow": {"store": "file"}})
    assert os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"
    for step in range(3):
        acc.log({"loss": 0.25 * step}, step=step)
    run_id = acc.get_tracker("mlflow", unwrap=True).info.run_id
    acc.end_training()
    # MLflow's file store, read as plain files: metrics/<key> holds "timestamp value step" lines
    (run_dir,) = (tmp_path / "mlruns").glob(f"*/{run_id}")
    lines = (run_dir / "metrics" / "loss").read_text().split("\n")
    assert [(int(s), float(v)) for _, v, s in (ln.split() for ln in lines if ln)] == [
        (0, 0.0),
        (1, 0.25),
        (2, 0.5),
    ]
    assert (run_dir / "params" / "lr").read_text() == "0.5"
    assert "status: 3" in (run_dir / "meta.yaml").read_text()  # FINISHED
    # The store chosen here stays out of os.environ (MLflow would put it there): another
    # run and the processes started later get their own default store.
    assert "MLFLOW_TRACKING_URI" not in os.environ
    second = Accelerator(cpu=True, log_with="mlflow", project_dir=str(tmp_path / "second"))
    second.init_trackers("exp")
    second.end_training()
    assert (tmp_path / "second" / "mlflow.db").is_file()


def test_log_before_init_trackers_is_caught() -> None:
    from overdrive.tracking import check_started

    with pytest.raises(TrackerError, match=r"before init_trackers\(\): log_with names jsonl"):
        check_started(["jsonl"], [])
    check_started(None, [])  # no trackers asked for: logging is a no-op, as in Accelerate
    check_started(["jsonl"], [NoOpTracker("jsonl")])


def test_a_tracker_of_your_own_as_instance_and_by_registered_name(tmp_path: Path) -> None:
    from overdrive.tracking import LOGGER_TYPE_TO_CLASS, GeneralTracker, register_tracker_class

    class Recorder(GeneralTracker):
        name = "recorder"
        requires_logging_directory = True

        def __init__(self, run_name: str = "", logging_dir: str = "", **kwargs: Any) -> None:
            super().__init__()
            self.run_name, self.logging_dir, self.rows, self.started = run_name, logging_dir, [], 0

        def start(self) -> None:
            self.started += 1

        def store_init_configuration(self, values: dict) -> None:
            self.rows.append(("config", values))

        def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
            self.rows.append((step, values))

    instance = Recorder()
    acc = Accelerator(cpu=True, log_with=instance)  # an instance carries its own directory
    acc.init_trackers("run", config={"lr": 0.1})
    acc.log({"loss": 1.0}, step=2)
    # The user's configuration as given: no overdrive settings in a tracker written for theirs.
    assert instance.started == 1 and instance.rows == [("config", {"lr": 0.1}), (2, {"loss": 1.0})]
    snapshot = dict(LOGGER_TYPE_TO_CLASS)
    try:
        register_tracker_class(Recorder)
        with pytest.raises(ValueError, match="Logging with `recorder` requires a `logging_dir`"):
            Accelerator(cpu=True, log_with="recorder")  # refused when made, as theirs is
        acc = Accelerator(cpu=True, log_with="recorder", project_dir=str(tmp_path))
        acc.init_trackers("named")
        made = acc.get_tracker("recorder")
        assert (made.run_name, made.logging_dir, made.started) == ("named", str(tmp_path), 1)
        with pytest.warns(UserWarning, match="recorder"):
            register_tracker_class(Recorder)
        with pytest.raises(ValueError):
            register_tracker_class(dict)
    finally:
        LOGGER_TYPE_TO_CLASS.clear()
        LOGGER_TYPE_TO_CLASS.update(snapshot)


def test_hugging_face_accelerates_other_trackers_are_named_and_refused() -> None:
    import overdrive.tracking  # noqa: F401  (their names exist once tracking is imported)

    with pytest.raises(ValueError, match="comet_ml tracker is not available in overdrive"):
        Accelerator(cpu=True, log_with="comet_ml")
