"""In-process tests that must not see a launcher's variables or the developer's config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def forget_launcher(monkeypatch: pytest.MonkeyPatch, cache: str | os.PathLike[str]) -> None:
    """Drop ACCELERATE_/OVERDRIVE_/TORCHELASTIC_ and rank variables; config cache in ``cache``."""
    for name in list(os.environ):
        prefixed = name.startswith(("ACCELERATE_", "OVERDRIVE_", "TORCHELASTIC_"))
        if prefixed or name in LAUNCHER_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(Path(cache)))
