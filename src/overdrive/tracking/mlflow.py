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

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from overdrive.tracking.base import Tracker, TrackerError, plain, scalar

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
    """MLflow, with Hugging Face Accelerate's parameters: ``experiment_name``, ``run_id``,
    ``tags`` (a dict or its JSON) and ``nested_run`` yield to MLflow's own
    ``MLFLOW_EXPERIMENT_NAME``, ``MLFLOW_RUN_ID``, ``MLFLOW_TAGS`` and ``MLFLOW_NESTED_RUN``
    when those are set; ``start()`` (``init_trackers`` calls it) opens the run.

    With a ``logging_dir`` the run goes to a local store there (see the module's note) unless
    ``tracking_uri=`` or ``MLFLOW_TRACKING_URI`` says otherwise; without one, to MLflow's
    default store. ``tracking_uri``, ``store`` and other ``mlflow.start_run`` arguments are
    overdrive's extra keywords.
    """

    name = "mlflow"
    requires_logging_directory = True

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool | str | None = False,
        run_name: str | None = None,
        description: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        super().__init__(experiment_name or "", Path(logging_dir) if logging_dir else None)
        tags = os.environ.get("MLFLOW_TAGS", tags)
        nested = os.environ.get("MLFLOW_NESTED_RUN", nested_run)
        self.experiment_name = experiment_name
        self.run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        self.tags = json.loads(tags) if isinstance(tags, str) else tags
        self.nested_run = _flag(nested) if isinstance(nested, str) else bool(nested)
        self.run_name = run_name
        self.description = description
        self.init_kwargs = init_kwargs
        self.run: Any = None

    @classmethod
    def requested(
        cls, project_name: str, logging_dir: Path | None, init_kwargs: dict[str, Any]
    ) -> MLflowTracker:
        """The tracker ``log_with="mlflow"`` starts: the experiment is the project."""
        return cls(project_name, logging_dir, **init_kwargs)

    def start(self) -> None:
        if self.run is not None:
            return
        import mlflow
        from mlflow.environment_variables import MLFLOW_TRACKING_URI

        kwargs = dict(self.init_kwargs)
        uri = kwargs.pop("tracking_uri", None)
        store = kwargs.pop("store", None)
        if uri is not None and store is not None:
            raise TrackerError(
                "init_kwargs['mlflow'] has both tracking_uri and store; one would be ignored\n"
                "  fix: pass tracking_uri=... for a store of your own, or store='sqlite'/'file'"
            )
        root = Path(self.logging_dir).resolve() if self.logging_dir is not None else None
        if (
            root is not None
            and uri is None
            and (store is not None or not MLFLOW_TRACKING_URI.defined)
        ):
            uri = store_uri(root, store or "sqlite")
        if is_file_store(uri if uri is not None else MLFLOW_TRACKING_URI.get() or ""):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # asked for by name
        if uri is not None:
            _set_tracking_uri(mlflow, uri)
        self.tracking_uri = mlflow.get_tracking_uri()
        experiment_id = _experiment(mlflow, self.experiment_name or "Default", root, self.tags)
        self._mlflow = mlflow
        options = {"run_name": self.run_name, "tags": self.tags, "description": self.description}
        kwargs.update({k: v for k, v in options.items() if v is not None})
        self.run = mlflow.start_run(
            run_id=self.run_id, experiment_id=experiment_id, nested=self.nested_run, **kwargs
        )

    @property
    def tracker(self) -> Any:
        return self.run

    @property
    def active_run(self) -> Any:
        """The run ``start()`` opened (Hugging Face Accelerate's attribute)."""
        return self.run

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        """Log ``config`` (nested keys joined with dots) as the run's parameters; a value longer
        than MLflow takes is left out with a warning. ``config`` itself is not changed."""
        from mlflow.utils import validation

        limit = validation.MAX_PARAM_VAL_LENGTH
        params, dropped = {}, []
        for key, value in _flat(plain(config)).items():
            if len(str(value)) > limit:
                dropped.append(key)
            else:
                params[key] = str(value)
        if dropped:
            warnings.warn(
                f"MLflow parameters hold at most {limit} characters: left out {dropped}",
                UserWarning,
                stacklevel=2,
            )
        items, batch = list(params.items()), validation.MAX_PARAMS_TAGS_PER_BATCH
        for start in range(0, len(items), batch):
            chunk = dict(items[start : start + batch])
            self._mlflow.log_params(chunk, run_id=self.run.info.run_id)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")
        metrics = {k: scalar(v) for k, v in values.items()}
        numbers = {k: float(v) for k, v in metrics.items() if v is not None}
        if numbers:
            self._mlflow.log_metrics(numbers, step=step, run_id=self.run.info.run_id, **kwargs)

    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """Save ``figure`` (matplotlib or plotly) as ``artifact_file`` among the run's
        artifacts; ``save_kwargs`` go to ``mlflow.log_figure``."""
        self.check_open("log_figure")
        client = self._mlflow.MlflowClient(self.tracking_uri)
        client.log_figure(self.run.info.run_id, figure, artifact_file, **save_kwargs)

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Copy the file ``local_path`` into the run's artifacts (under ``artifact_path``)."""
        self.check_open("log_artifact")
        self._mlflow.log_artifact(local_path, artifact_path, run_id=self.run.info.run_id)

    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        """Copy everything in ``local_dir`` into the run's artifacts (under ``artifact_path``)."""
        self.check_open("log_artifacts")
        self._mlflow.log_artifacts(local_dir, artifact_path, run_id=self.run.info.run_id)

    def finish(self) -> None:
        if not self.mark_finished() or self.run is None:
            return
        run_id = self.run.info.run_id
        active = self._mlflow.active_run()
        if active is not None and active.info.run_id == run_id:
            self._mlflow.end_run()
        else:  # the user started another run meanwhile: end ours without touching theirs
            self._mlflow.MlflowClient(self.tracking_uri).set_terminated(run_id)


def _flag(text: str) -> bool:
    """An environment variable's yes/no (``1``, ``true``, ``yes``, ``on`` and their noes)."""
    word = text.strip().lower()
    if word in ("1", "true", "yes", "y", "on"):
        return True
    if word in ("0", "false", "no", "n", "off", ""):
        return False
    raise TrackerError(
        f"MLFLOW_NESTED_RUN={text!r} is not a yes/no value\n  fix: set it to true or false"
    )


def _experiment(mlflow: Any, name: str, root: Path | None, tags: Any) -> str:
    """The id of the experiment called ``name``, created (artifacts under ``root``) if new."""
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        return str(experiment.experiment_id)
    location = (root / "mlartifacts").as_uri() if root is not None else None
    return str(mlflow.create_experiment(name, artifact_location=location, tags=tags))


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
