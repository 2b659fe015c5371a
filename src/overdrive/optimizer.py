"""Hugging Face Accelerate's ``accelerate.optimizer``: the prepared optimizer, which the engine
defines in ``overdrive.training.optimizer``."""

from __future__ import annotations

from overdrive.training.optimizer import (
    AcceleratedOptimizer,
    move_to_device,
    patch_optimizer_step,
)

__all__ = ["AcceleratedOptimizer", "move_to_device", "patch_optimizer_step"]
