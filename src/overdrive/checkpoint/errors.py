"""Errors a user can cause while saving or loading checkpoints."""

from __future__ import annotations

from overdrive.errors import OverdriveError


class CheckpointError(OverdriveError):
    """A checkpoint cannot be saved or loaded as asked; the message names the part and the fix."""


class CheckpointMismatchError(CheckpointError):
    """The parts in a checkpoint do not match what was prepared."""

    def __init__(self, path: str, problems: list[str], fix: str) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"checkpoint {path} does not match what this run prepared:\n{lines}\n  fix: {fix}"
        )


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file would have to be unpickled, which runs arbitrary code."""


class CollectiveTimeoutError(CheckpointError):
    """Not every process reached a save/load within the collective timeout."""
