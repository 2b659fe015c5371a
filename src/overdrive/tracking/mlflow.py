"""MLflow, recording into a local database file under ``logging_dir`` by default.

Default tracking URI: ``sqlite:///{logging_dir}/mlflow.db`` (MLflow's recommended local
store; its older ``./mlruns`` file store is in maintenance mode), artifacts under
``{logging_dir}/mlartifacts``. ``init_kwargs={"mlflow": {"tracking_uri": ...}}`` or
MLflow's own ``MLFLOW_TRACKING_URI`` picks another store or a server. Other init kwargs
go to ``mlflow.start_run``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from overdrive.tracking.base import Tracker, plain, scalar

_MAX_PARAM_LENGTH = 500  # the limit of older MLflow servers


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
        if uri is None and not MLFLOW_TRACKING_URI.defined:
            root.mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{root / 'mlflow.db'}"
            # Schema creation logs at INFO on every new database; keep the user's output clean.
            logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
            logging.getLogger("alembic").setLevel(logging.WARNING)
        if uri is not None:
            mlflow.set_tracking_uri(uri)
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
        metrics = {k: scalar(v) for k, v in values.items()}
        numbers = {k: float(v) for k, v in metrics.items() if v is not None}
        if numbers:
            self._mlflow.log_metrics(numbers, step=step, run_id=self.run.info.run_id, **kwargs)

    def finish(self) -> None:
        self._mlflow.end_run()


def _flat(config: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(config, dict):
        return {prefix: config}
    out: dict[str, Any] = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}." if isinstance(value, dict) else prefix + key))
    return out
