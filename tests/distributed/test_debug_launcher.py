"""``debug_launcher`` runs a ``functools.partial`` on two CPU processes."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from overdrive import debug_launcher
from tests.helpers.env import forget_launcher


def _write_rank(folder: Path, tag: str) -> None:
    rank = os.environ["RANK"]
    (folder / f"{tag}-{rank}").write_text(rank)


def test_debug_launcher_runs_a_partial(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    debug_launcher(functools.partial(_write_rank, out, "p"), num_processes=2)
    assert sorted(p.name for p in out.iterdir()) == ["p-0", "p-1"]
