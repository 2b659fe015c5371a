"""A save that fails for lack of room fails with a CheckpointError naming the file it could
not write, leaves no partial directory behind, and the next save works.

The write failures are real (RLIMIT_FSIZE: the kernel refuses to write past the limit with
EFBIG, as a full disk refuses with ENOSPC); see scripts/ckpt_disk_full.py.

Under DDP the main process may save alone: process 1 either joins its save before the
commit (then every process fails with the error) or arrives after it and adds its state to
the committed checkpoint (then a failure there is process 1's alone). Both orders are
forced, so neither depends on which process the machine happens to run first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, free_port, run_launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = Path(__file__).parent / "scripts" / "ckpt_disk_full.py"


# The first file each rank writes that is larger than the limit.
FIRST_BIG_FILE = {0: "model_0.safetensors", 1: "rank_1/state.json"}


def _launch(tmp_path: Path, full: int, order: str) -> Path:
    result = run_launch(
        SCRIPT,
        args=["--out", str(tmp_path), "--full", str(full), "--order", order],
        launch_args=["--main_process_port", str(free_port())],
    )
    assert_ok(result)
    return tmp_path / "project" / "checkpoints"


def _error(tmp_path: Path, rank: int) -> dict[str, str] | None:
    error: dict[str, str] | None = json.loads((tmp_path / f"error_{rank}.json").read_text())
    return error


def _saved(tmp_path: Path, rank: int) -> str:
    saved: str = json.loads((tmp_path / f"saved_{rank}.json").read_text())
    return saved


@pytest.mark.parametrize(
    ("full", "order"),
    [(0, "joined"), (1, "joined"), (0, "late")],
    ids=["rank 0 full", "rank 1 full, joined", "rank 0 full, rank 1 late"],
)
def test_disk_full_before_the_commit_is_a_checkpoint_error_naming_the_file_everywhere(
    full: int, order: str, tmp_path: Path
) -> None:
    root = _launch(tmp_path, full, order)
    for rank in (0, 1):
        error = _error(tmp_path, rank)
        assert error is not None, f"rank {rank}: the save did not fail"
        assert error["type"] == "CheckpointError", error
        message = error["message"]
        # The failing rank names the file it could not write; the other rank names it too
        # (passed on), so every process's error says where the room ran out.
        assert "File too large" in message, message
        assert str(root / ".checkpoint_0.") in message, message
        assert FIRST_BIG_FILE[full] in message, message
    # The failed save left nothing; the one after it is checkpoint_0, complete.
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint_0"]
    for rank in (0, 1):
        assert _saved(tmp_path, rank) == str(root / "checkpoint_0")
    assert (root / "checkpoint_0" / "overdrive_checkpoint.json").is_file()
    assert (root / "checkpoint_0" / "rank_1" / "state.json").is_file()


def test_disk_full_after_the_commit_fails_only_the_late_process_and_leaves_the_checkpoint(
    tmp_path: Path,
) -> None:
    root = _launch(tmp_path, full=1, order="late")
    # The main process committed checkpoint_0 before process 1 came: its save succeeded.
    assert _error(tmp_path, 0) is None
    error = _error(tmp_path, 1)
    assert error is not None, "rank 1: the save did not fail"
    assert error["type"] == "CheckpointError", error
    message = error["message"]
    assert "File too large" in message, message
    assert str(root / "checkpoint_0" / ".rank_1.") in message, message
    # checkpoint_0 stays complete without process 1's state (a resume takes the main
    # process's), with no partial directory left in it; the next save is checkpoint_1.
    first = root / "checkpoint_0"
    assert (first / "overdrive_checkpoint.json").is_file()
    assert sorted(p.name for p in first.iterdir() if p.is_dir()) == ["rank_0"]
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint_0", "checkpoint_1"]
    for rank in (0, 1):
        assert _saved(tmp_path, rank) == str(root / "checkpoint_1")
    assert (root / "checkpoint_1" / "rank_1" / "state.json").is_file()
