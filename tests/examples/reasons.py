"""Why a row of the examples table differs or does not run, as measured and explained.

Keyed by case name and process count (None: every count). A row that differs and has no
entry shows the runs' own error lines instead, so an unexplained difference stays visible.
"""

from __future__ import annotations

REASONS: dict[tuple[str, int | None], str] = {}


def reason_for(name: str, processes: int) -> str:
    """The recorded explanation for a case on ``processes`` processes ('' when none)."""
    return REASONS.get((name, processes)) or REASONS.get((name, None), "")
