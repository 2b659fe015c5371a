"""Weights & Biases. Offline runs need no network: pass
``init_kwargs={"wandb": {"mode": "offline"}}`` or set ``WANDB_MODE=offline``; the run
directory goes under ``logging_dir`` when one is set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from overdrive.tracking.base import Tracker


class WandBTracker(Tracker):
    name = "wandb"

    def __init__(self, project_name: str, logging_dir: Path | None, **init_kwargs: Any) -> None:
        super().__init__(project_name, logging_dir)
        import wandb

        if logging_dir is not None and "dir" not in init_kwargs:
            Path(logging_dir).mkdir(parents=True, exist_ok=True)
            init_kwargs["dir"] = str(logging_dir)
        self.run = wandb.init(project=project_name, **init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")
        self.run.log(values, step=step, **kwargs)

    def finish(self) -> None:
        if self.mark_finished():
            self.run.finish()
