"""TensorBoard through ``torch.utils.tensorboard`` (needs the ``tensorboard`` package).

Event files go to ``{logging_dir}/{project_name}``; numbers become scalars, text becomes
text, a dict of numbers becomes one chart (``add_scalars``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from overdrive.tracking.base import Tracker, plain, scalar


class TensorBoardTracker(Tracker):
    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, project_name: str, logging_dir: Path | None, **init_kwargs: Any) -> None:
        super().__init__(project_name, logging_dir)
        from torch.utils.tensorboard import SummaryWriter

        assert logging_dir is not None
        self.log_dir = Path(logging_dir) / project_name
        self.writer = SummaryWriter(str(self.log_dir), **init_kwargs)

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
        if self.mark_finished():
            self.writer.close()
