"""Automatic names, the completion marker, newest-complete lookup, rotation, atomic commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.checkpoint import CheckpointError
from overdrive.checkpoint.atomic import commit, prepare_temp
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
    temp = prepare_temp(final)
    assert temp == temp_dir_for(final) and temp.name.startswith(".")
    (temp / "model_0.json").write_text('{"new": 1}')
    assert not (temp / MANIFEST).exists()
    commit(temp, final, {"format": "x"})
    assert (final / MANIFEST).exists() and not temp.exists()
    assert not (final / "stale.json").exists()
    assert (final / "model_0.json").read_text() == '{"new": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_0"]


def test_stale_temp_dir_from_a_killed_save_is_cleared(tmp_path: Path) -> None:
    final = tmp_path / "checkpoint_1"
    temp_dir_for(final).mkdir()
    (temp_dir_for(final) / "half_written").write_text("x")
    temp = prepare_temp(final)
    assert list(temp.iterdir()) == []


def test_refuses_to_replace_a_directory_of_other_files(tmp_path: Path) -> None:
    target = tmp_path / "outputs"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not an overdrive checkpoint"):
        prepare_temp(target)
    assert (target / "notes.txt").exists()
