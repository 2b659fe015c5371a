"""Automatic names, the completion marker, newest-complete lookup, rotation, atomic commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.checkpoint import CheckpointError
from overdrive.checkpoint.atomic import commit, stage
from overdrive.checkpoint.layout import (
    MANIFEST,
    newest_complete,
    next_index,
    numbered,
    rotate,
    temp_dir_for,
)


def _make(root: Path, n: int, complete: bool = True) -> Path:
    path = root / f"checkpoint_{n}"
    path.mkdir(parents=True)
    (path / "model_0.json").write_text("{}")
    if complete:
        (path / MANIFEST).write_text("{}")
    return path


def test_numbers_sort_numerically_and_next_follows_the_highest(tmp_path: Path) -> None:
    for n in (2, 10, 9):
        _make(tmp_path, n)
    (tmp_path / "checkpoint_x").mkdir()
    (tmp_path / ".checkpoint_11.partial").mkdir()
    assert [n for n, _ in numbered(tmp_path)] == [2, 9, 10]
    assert next_index(tmp_path) == 11
    assert next_index(tmp_path, iteration=20) == 20
    assert next_index(tmp_path / "missing") == 0


def test_newest_complete_skips_incomplete_and_temp_dirs(tmp_path: Path) -> None:
    _make(tmp_path, 3)
    _make(tmp_path, 4, complete=False)
    (tmp_path / ".checkpoint_5.partial").mkdir()
    assert newest_complete(tmp_path) == tmp_path / "checkpoint_3"
    # An incomplete directory still takes its number: it is never overwritten.
    assert next_index(tmp_path) == 5
    assert newest_complete(tmp_path / "none") is None


def test_rotation_removes_the_oldest_by_number(tmp_path: Path) -> None:
    for n in (1, 2, 9, 10):
        _make(tmp_path, n)
    removed = rotate(tmp_path, 2, keep=tmp_path / "checkpoint_10")
    assert [p.name for p in removed] == ["checkpoint_1", "checkpoint_2"]
    assert [p.name for _, p in numbered(tmp_path)] == ["checkpoint_9", "checkpoint_10"]
    assert rotate(tmp_path, None, keep=tmp_path / "checkpoint_10") == []


def test_commit_marks_and_renames_and_replaces_an_old_checkpoint(tmp_path: Path) -> None:
    final = _make(tmp_path, 0)
    (final / "stale.json").write_text("{}")
    staging = stage(final, automatic=False)
    temp = staging.path
    assert temp.name.startswith(".checkpoint_0.") and temp.name.endswith(".partial")
    (temp / "model_0.json").write_text('{"new": 1}')
    assert not (temp / MANIFEST).exists()
    assert commit(staging, final, {"format": "x"}, replace=True) == final
    staging.release()
    assert (final / MANIFEST).exists() and not temp.exists()
    assert not (final / "stale.json").exists()
    assert (final / "model_0.json").read_text() == '{"new": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_0"]


def test_stale_temp_dirs_from_killed_saves_are_cleared(tmp_path: Path) -> None:
    final = tmp_path / "checkpoint_1"
    for stale in (tmp_path / ".checkpoint_1.partial", temp_dir_for(final, "dead")):
        stale.mkdir()
        (stale / "half_written").write_text("x")
    staging = stage(final, automatic=True)
    assert list(staging.path.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == [staging.path.name]
    staging.remove()
    assert list(tmp_path.iterdir()) == []


def test_a_live_save_keeps_its_temp_dir_and_its_number(tmp_path: Path) -> None:
    """Another job saving into the same directory: its temp dir is locked, so it stays;
    both commits succeed, under two numbers, and neither replaces the other."""
    final = tmp_path / "checkpoint_0"
    first = stage(final, automatic=True)
    second = stage(final, automatic=True)  # the same number, chosen before either commits
    assert first.path.is_dir() and second.path != first.path
    (first.path / "model_0.json").write_text('"first"')
    (second.path / "model_0.json").write_text('"second"')
    assert commit(first, final, {"name": final.name}, replace=False) == final
    moved = commit(second, final, {"name": final.name}, replace=False)
    first.release()
    second.release()
    assert moved == tmp_path / "checkpoint_1"
    assert (final / "model_0.json").read_text() == '"first"'
    assert (moved / "model_0.json").read_text() == '"second"'
    assert '"checkpoint_1"' in (moved / MANIFEST).read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_0", "checkpoint_1"]


def test_refuses_to_replace_a_directory_of_other_files(tmp_path: Path) -> None:
    target = tmp_path / "outputs"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not an overdrive checkpoint"):
        stage(target, automatic=False)
    assert (target / "notes.txt").exists()
