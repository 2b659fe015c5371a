"""Hugging Face Accelerate's old ``accelerate.memory_utils`` module: its contents moved to
``overdrive.utils.memory``; importing it says so, with a FutureWarning, as Accelerate does."""

from __future__ import annotations

import warnings

warnings.warn(
    "memory_utils has been reorganized to utils.memory. Import `find_executable_batch_size` "
    "from the main `__init__`: `from overdrive import find_executable_batch_size` to avoid "
    "this warning.",
    FutureWarning,
    stacklevel=2,
)
