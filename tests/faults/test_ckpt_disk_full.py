"""A save that fails for lack of room fails on every process with a CheckpointError naming
the file it could not write, leaves no partial directory behind, and the next save works.

The write failures are real (RLIMIT_FSIZE: the kernel refuses to write past the limit with
EFBIG, as a full disk refuses with ENOSPC); see scripts/ckpt_disk_full.py.
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


@pytest.mark.parametrize("full", [0, 1], ids=["rank 0 full", "rank 1 full"])
def test_disk_full_is_a_checkpoint_error_naming_the_file_everywhere(
    full: int, tmp_path: Path
) -> None:
    result = run_launch(
        SCRIPT,
        args=["--out", str(tmp_path), "--full", str(full)],
        launch_args=["--main_process_port", str(free_port())],
    )
    assert_ok(result)
    root = tmp_path / "project" / "checkpoints"
    for rank in (0, 1):
        error = json.loads((tmp_path / f"error_{rank}.json").read_text())
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
        assert json.loads((tmp_path / f"saved_{rank}.json").read_text()) == str(
            root / "checkpoint_0"
        )
    assert (root / "checkpoint_0" / "overdrive_checkpoint.json").is_file()
