"""Weights & Biases. Offline runs need no network: pass
``init_kwargs={"wandb": {"mode": "offline"}}`` or set ``WANDB_MODE=offline``; the run
directory goes under ``logging_dir`` when one is set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from overdrive.tracking.base import Tracker


class WandBTracker(Tracker):
    """Weights & Biases, as Hugging Face Accelerate builds it: ``WandBTracker(run_name,
    **kwargs)``; ``start()`` calls ``wandb.init(project=run_name, **kwargs)``.
    ``logging_dir`` (overdrive's, keyword-only) becomes wandb's ``dir`` unless given."""

    name = "wandb"

    def __init__(
        self, run_name: str, *, logging_dir: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(run_name, Path(logging_dir) if logging_dir is not None else None)
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.run: Any = None

    @classmethod
    def requested(
        cls, project_name: str, logging_dir: Path | None, init_kwargs: dict[str, Any]
    ) -> WandBTracker:
        """The tracker ``log_with="wandb"`` starts."""
        return cls(project_name, logging_dir=logging_dir, **init_kwargs)

    def start(self) -> None:
        if self.run is not None:
            return
        import wandb

        kwargs = dict(self.init_kwargs)
        if self.logging_dir is not None and "dir" not in kwargs:
            Path(self.logging_dir).mkdir(parents=True, exist_ok=True)
            kwargs["dir"] = str(self.logging_dir)
        self.run = wandb.init(project=self.run_name, **kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")
        self.run.log(values, step=step, **kwargs)

    def finish(self) -> None:
        if self.mark_finished() and self.run is not None:
            self.run.finish()
