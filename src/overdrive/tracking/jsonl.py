"""A dependency-free tracker: one JSON object per ``log`` call, one line each.

Files: ``{logging_dir}/{project_name}/metrics.jsonl`` with lines
``{"step": 3, "time": 1716.2, "values": {"loss": 0.25}}`` and ``config.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from overdrive.tracking.base import Tracker, plain


class JSONLTracker(Tracker):
    name = "jsonl"
    requires_logging_directory = True

    def __init__(self, project_name: str, logging_dir: Path | None, **init_kwargs: Any) -> None:
        super().__init__(project_name, logging_dir)
        assert logging_dir is not None
        self.run_dir = Path(logging_dir) / project_name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        text = json.dumps(plain(config), indent=1, allow_nan=False)
        (self.run_dir / "config.json").write_text(text, encoding="utf-8")

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")
        record = {"step": step, "time": time.time(), "values": plain(values)}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")

    def finish(self) -> None:
        if self.mark_finished():
            self._file.close()
