"""Hugging Face Accelerate's ``accelerate.checkpointing``: save and load a run's pieces (model
states, optimizers, schedulers, dataloaders, the loss scaler, the RNGs) under the file names
it uses. The engine does the work (``overdrive/checkpoint/accelerate_state.py``): it writes
no pickle, and reads Hugging Face Accelerate's pickle files as data only."""

from __future__ import annotations

from overdrive.checkpoint.accelerate_state import (
    load_accelerator_state,
    load_custom_state,
    logger,
    save_accelerator_state,
    save_custom_state,
)

__all__ = [
    "load_accelerator_state",
    "load_custom_state",
    "logger",
    "save_accelerator_state",
    "save_custom_state",
]
