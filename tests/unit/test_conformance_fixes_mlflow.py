"""The MLflow tracker's Hugging Face Accelerate API: ``active_run``, artifacts and figures,
and parameters too long for MLflow left out without changing the caller's config
(its test_tracking.py::MLflowTrackingTest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.accelerator import Accelerator
from overdrive.tracking.mlflow import MLflowTracker

mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def tracker(tmp_path: Path) -> MLflowTracker:
    made = MLflowTracker(experiment_name="exp", logging_dir=str(tmp_path / "logs"))
    Accelerator(cpu=True, log_with=made).init_trackers("exp")
    return made


def _client(tracker: MLflowTracker) -> object:
    return mlflow.MlflowClient(tracker.tracking_uri)


def test_artifacts_and_figures_reach_the_run(tracker: MLflowTracker, tmp_path: Path) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    run_id = tracker.active_run.info.run_id
    assert tracker.active_run is tracker.tracker
    tracker.log_artifact(str(tmp_path / "b.txt"), artifact_path="files")
    tracker.log_artifacts(str(tmp_path / "folder"), artifact_path="dir")
    tracker.log_figure(plt.figure(figsize=(2, 2)), artifact_file="figure.png")
    tracker.finish()
    client = _client(tracker)
    assert [a.path for a in client.list_artifacts(run_id, "files")] == ["files/b.txt"]
    assert [a.path for a in client.list_artifacts(run_id, "dir")] == ["dir/a.txt"]
    assert "figure.png" in [a.path for a in client.list_artifacts(run_id)]


def test_too_long_parameters_are_left_out_and_the_config_is_kept(
    tracker: MLflowTracker,
) -> None:
    limit = mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
    config = {"lr": 0.5, "long": "x" * (limit + 1), "fits": "y" * limit}
    before = dict(config)
    with pytest.warns(UserWarning, match="left out"):
        tracker.store_init_configuration(config)
    run_id = tracker.active_run.info.run_id
    tracker.finish()
    assert config == before
    params = _client(tracker).get_run(run_id).data.params
    assert params["lr"] == "0.5" and params["fits"] == "y" * limit
    assert "long" not in params
