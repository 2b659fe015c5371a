"""Checkpoints: exact, safe (no pickle on load) and atomic save/resume, and save_model.

The Accelerator delegates ``save_state``, ``load_state`` and ``save_model`` here.
"""

from __future__ import annotations

from overdrive.checkpoint.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CollectiveTimeoutError,
    UnsafeCheckpointError,
)
from overdrive.checkpoint.layout import MANIFEST, checkpoints_root, newest_complete
from overdrive.checkpoint.load import load_state
from overdrive.checkpoint.model_files import save_model
from overdrive.checkpoint.save import save_state

__all__ = [
    "MANIFEST",
    "CheckpointError",
    "CheckpointMismatchError",
    "CollectiveTimeoutError",
    "UnsafeCheckpointError",
    "checkpoints_root",
    "load_state",
    "newest_complete",
    "save_model",
    "save_state",
]
