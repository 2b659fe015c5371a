"""MLflow, recording into a local store under ``logging_dir`` by default.

Default store: ``sqlite:///{logging_dir}/mlflow.db`` (MLflow's recommended local store),
artifacts under ``{logging_dir}/mlartifacts``. ``init_kwargs={"mlflow": {"store": "file"}}``
picks MLflow's plain file store ``{logging_dir}/mlruns`` instead. MLflow 3 keeps that store in
maintenance mode and refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is true; asking for it
(``store="file"``, or a ``file:`` / plain-path tracking URI) is that opt-in, so overdrive sets
the variable for this process (unless it is set already). ``init_kwargs={"mlflow":
{"tracking_uri": ...}}`` or MLflow's own ``MLFLOW_TRACKING_URI`` picks any other store or a
server. Other init kwargs go to ``mlflow.start_run``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from overdrive.tracking.base import Tracker, TrackerError, plain, scalar

_MAX_PARAM_LENGTH = 500  # the limit of older MLflow servers
STORES = ("sqlite", "file")


def is_file_store(uri: str) -> bool:
    """True for URIs MLflow serves with its file store: ``file:...`` or a plain path."""
    if uri.startswith("databricks"):  # "databricks" / "databricks://profile": a workspace
        return False
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or len(scheme) == 1  # one letter: a Windows drive


def store_uri(root: Path, store: str) -> str:
    """The tracking URI of the local ``store`` kind under ``root``."""
    if store not in STORES:
        raise TrackerError(
            f"init_kwargs['mlflow']['store']={store!r} is not a local MLflow store\n"
            f"  fix: use one of {', '.join(STORES)}, or pass tracking_uri=..."
        )
    root.mkdir(parents=True, exist_ok=True)
    if store == "file":
        return (root / "mlruns").as_uri()
    # Schema creation logs at INFO on every new database; keep the user's output clean.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return f"sqlite:///{root / 'mlflow.db'}"


class MLflowTracker(Tracker):
    name = "mlflow"
    requires_logging_directory = True

    def __init__(self, project_name: str, logging_dir: Path | None, **init_kwargs: Any) -> None:
        super().__init__(project_name, logging_dir)
        import mlflow
        from mlflow.environment_variables import MLFLOW_TRACKING_URI

        assert logging_dir is not None
        root = Path(logging_dir).resolve()
        uri = init_kwargs.pop("tracking_uri", None)
        store = init_kwargs.pop("store", None)
        if uri is not None and store is not None:
            raise TrackerError(
                "init_kwargs['mlflow'] has both tracking_uri and store; one would be ignored\n"
                "  fix: pass tracking_uri=... for a store of your own, or store='sqlite'/'file'"
            )
        if uri is None and (store is not None or not MLFLOW_TRACKING_URI.defined):
            uri = store_uri(root, store or "sqlite")
        if is_file_store(uri if uri is not None else MLFLOW_TRACKING_URI.get()):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # asked for by name
        if uri is not None:
            _set_tracking_uri(mlflow, uri)
        self.tracking_uri = mlflow.get_tracking_uri()
        experiment = mlflow.get_experiment_by_name(project_name)
        if experiment is None:
            experiment_id = mlflow.create_experiment(
                project_name, artifact_location=(root / "mlartifacts").as_uri()
            )
        else:
            experiment_id = experiment.experiment_id
        self._mlflow = mlflow
        self.run = mlflow.start_run(experiment_id=experiment_id, **init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        params = {}
        for key, value in _flat(plain(config)).items():
            text = str(value)
            params[key] = text if len(text) <= _MAX_PARAM_LENGTH else text[:_MAX_PARAM_LENGTH]
        if params:
            self._mlflow.log_params(params, run_id=self.run.info.run_id)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")
        metrics = {k: scalar(v) for k, v in values.items()}
        numbers = {k: float(v) for k, v in metrics.items() if v is not None}
        if numbers:
            self._mlflow.log_metrics(numbers, step=step, run_id=self.run.info.run_id, **kwargs)

    def finish(self) -> None:
        if not self.mark_finished():
            return
        run_id = self.run.info.run_id
        active = self._mlflow.active_run()
        if active is not None and active.info.run_id == run_id:
            self._mlflow.end_run()
        else:  # the user started another run meanwhile: end ours without touching theirs
            self._mlflow.MlflowClient(self.tracking_uri).set_terminated(run_id)


def _set_tracking_uri(mlflow: Any, uri: str) -> None:
    """``mlflow.set_tracking_uri`` without the ``MLFLOW_TRACKING_URI`` it leaves in
    ``os.environ``: a later tracker (another ``logging_dir``) would take that for the user's
    choice and log into this run's store, and so would every subprocess started later."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


def _flat(config: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(config, dict):
        return {prefix: config}
    out: dict[str, Any] = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}." if isinstance(value, dict) else prefix + key))
    return out
