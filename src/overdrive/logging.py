"""Hugging Face Accelerate's ``accelerate.logging``: the logger that knows the process's rank,
which the engine defines in ``overdrive.environment.rank_logging``."""

from __future__ import annotations

from overdrive.environment.rank_logging import MultiProcessAdapter, get_logger

__all__ = ["MultiProcessAdapter", "get_logger"]
