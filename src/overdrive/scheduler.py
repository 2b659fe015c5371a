"""Hugging Face Accelerate's ``accelerate.scheduler``: the prepared learning-rate scheduler,
which the engine defines in ``overdrive.training.scheduler``."""

from __future__ import annotations

from overdrive.training.scheduler import AcceleratedScheduler

__all__ = ["AcceleratedScheduler"]
