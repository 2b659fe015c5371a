"""Hugging Face Accelerate's ``accelerate.launchers``: start a function on several processes
from one Python process (``notebook_launcher``, ``debug_launcher``), which the engine defines
in ``overdrive/launch/notebook.py``; ``test_launch`` checks a process state forms."""

from __future__ import annotations

from typing import Any

from overdrive.launch.notebook import debug_launcher, notebook_launcher

__all__ = ["debug_launcher", "notebook_launcher", "test_launch"]


def test_launch() -> Any:
    """Make the process state of this process (rank, world, device), as a launched function's
    first line would; an error here is the launch problem, not the training code's."""
    # deferred: keeps overdrive.launchers torch-free, as overdrive.launch.notebook is
    from overdrive.processes.process_state import PartialState

    return PartialState()
