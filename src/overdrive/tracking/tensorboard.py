"""TensorBoard through ``torch.utils.tensorboard`` (needs the ``tensorboard`` package).

Event files go to ``{logging_dir}/{project_name}``; numbers become scalars, text becomes
text, a dict of numbers becomes one chart (``add_scalars``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from overdrive.tracking.base import Tracker, TrackerError, plain, scalar


class TensorBoardTracker(Tracker):
    """TensorBoard, as Hugging Face Accelerate builds it: ``TensorBoardTracker(run_name,
    logging_dir, **kwargs)`` remembers where to write; ``start()`` (``init_trackers`` calls
    it) opens the ``SummaryWriter(logging_dir/run_name, **kwargs)``."""

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str] | None, **kwargs: Any
    ) -> None:
        super().__init__(run_name, Path(logging_dir) if logging_dir is not None else None)
        self.run_name = run_name
        self.logging_dir_param = logging_dir
        self.init_kwargs = kwargs
        self.writer: Any = None

    @classmethod
    def requested(
        cls, project_name: str, logging_dir: Path | None, init_kwargs: dict[str, Any]
    ) -> TensorBoardTracker:
        """The tracker ``log_with="tensorboard"`` starts."""
        return cls(project_name, logging_dir, **init_kwargs)

    def start(self) -> None:
        if self.writer is not None:
            return
        from torch.utils.tensorboard import SummaryWriter

        if self.logging_dir is None:
            raise TrackerError(
                "TensorBoardTracker has no logging_dir to write under\n"
                "  fix: TensorBoardTracker(run_name, logging_dir='logs')"
            )
        self.log_dir = Path(self.logging_dir) / self.run_name
        self.writer = SummaryWriter(str(self.log_dir), **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        text = json.dumps(plain(config), indent=2, allow_nan=False)
        self.writer.add_text("config", f"```\n{text}\n```")
        self.writer.flush()

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")
        for key, value in values.items():
            number = scalar(value)
            if number is not None:
                self.writer.add_scalar(key, number, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                numbers = {k: scalar(v) for k, v in value.items()}
                self.writer.add_scalars(
                    key, {k: v for k, v in numbers.items() if v is not None}, global_step=step
                )
        self.writer.flush()

    def finish(self) -> None:
        if self.mark_finished() and self.writer is not None:
            self.writer.close()
