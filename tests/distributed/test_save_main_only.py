"""save_state from the main process alone (diffusers' pattern): complete and no hang where
every process holds the whole state; named with its fix where the state is sharded."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dist import SCRIPTS, assert_ok, result_rows, run_launch, run_python

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("mode", ["main", "every"])
def test_ddp_save_state_from_the_main_process_alone_or_from_every_process(
    tmp_path: Path, mode: str
) -> None:
    result = run_launch("save_main_only.py", args=[str(tmp_path), mode])
    rows = _rows(result)
    _no_store_timeouts(result)  # the main process waited for no one
    assert rows[0]["same"]
    assert rows[0]["logged"] >= 6  # the main process's tracker; log() elsewhere does nothing
    if mode == "main":
        assert rows[0]["rank_dirs"] == ["rank_0"]
        assert rows[1]["alone_warning"] and not rows[0]["alone_warning"]
        # process 1's RNG streams are not in the checkpoint: it keeps its own, as under
        # Hugging Face Accelerate; process 0's are restored
        assert rows[1]["rng_kept"] and not rows[0]["rng_kept"]
    else:
        assert not any(r["rng_kept"] for r in rows)  # each process's streams restored
        assert rows[0]["rank_dirs"] == ["rank_0", "rank_1"]
        assert not any(r["alone_warning"] for r in rows)


def test_fsdp_save_state_from_the_main_process_alone_is_named(tmp_path: Path) -> None:
    result = run_launch(
        "save_main_only.py",
        args=[str(tmp_path), "main", "fsdp"],
        launch_args=["--hang_timeout", "6"],
        timeout=120,
    )
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "save_state" in text and "is_main_process" in text, text[-3000:]


def _rows(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert [r["rank"] for r in rows] == [0, 1]
    return rows


def _no_store_timeouts(result: subprocess.CompletedProcess[str]) -> None:
    """No wait on the process group's store ran out (c10d prints these lines when one does)."""
    text = result.stdout + result.stderr
    assert "timed out after" not in text and "socket.cpp" not in text, text[-3000:]


def test_every_process_saving_into_its_own_directory_is_one_save(tmp_path: Path) -> None:
    """Hugging Face Accelerate's test_stateful_dataloader_save_state: each process saves into
    its own temporary directory and loads it; one save, each process's state in it."""
    result = run_launch("save_positions.py", args=[str(tmp_path), "own_dirs"])
    rows = _rows(result)
    _no_store_timeouts(result)
    assert rows[0]["returned"] == rows[0]["own"]
    assert rows[1]["returned"] == rows[0]["own"]  # where process 1's state went
    assert all(r["same"] and not r["warned"] for r in rows)


def test_an_every_process_save_after_a_main_only_one_keeps_its_step(tmp_path: Path) -> None:
    """The main process saves alone at step 2, every process at step 4: process 1's step-4
    state goes into the step-4 checkpoint, which the main process commits without waiting."""
    result = run_launch("save_positions.py", args=[str(tmp_path), "auto"])
    rows = _rows(result)
    _no_store_timeouts(result)
    root = tmp_path / "project" / "checkpoints"
    assert [r["returned"] for r in rows] == [str(root / "checkpoint_1")] * 2
    assert rows[0]["dirs"] == {"checkpoint_0": ["rank_0"], "checkpoint_1": ["rank_0", "rank_1"]}
    assert all(r["same"] and not r["warned"] for r in rows)
    assert rows[1]["warned_first"] and not rows[0]["warned_first"]


@pytest.mark.extended
def test_a_named_folder_saved_by_every_process_after_a_main_only_save(tmp_path: Path) -> None:
    """The same into one folder, ``latest``: process 1's step-4 state is in the step-4 save
    that replaced the step-2 one, not lost with it."""
    result = run_launch("save_positions.py", args=[str(tmp_path), "named"])
    rows = _rows(result)
    _no_store_timeouts(result)
    assert [r["returned"] for r in rows] == [str(tmp_path / "latest")] * 2
    assert rows[0]["dirs"]["latest"] == ["rank_0", "rank_1"]
    assert all(r["same"] and not r["warned"] for r in rows)


def test_rotation_does_not_lose_a_late_process(tmp_path: Path) -> None:
    """total_limit=1: the main process saves twice at one step; process 1 calls its two saves
    once the first checkpoint was rotated away: its state goes into the newest one."""
    rows = _rows(run_launch("save_positions.py", args=[str(tmp_path), "rotate"]))
    root = tmp_path / "project" / "checkpoints"
    newest = str(root / "checkpoint_1")
    assert rows[0]["main_returned"] == [str(root / "checkpoint_0"), newest]
    assert rows[1]["returned"] == [newest, newest]
    assert rows[0]["dirs"] == {"checkpoint_1": ["rank_0", "rank_1"]}
    assert all(r["same"] and not r["warned"] for r in rows)


@pytest.mark.extended
def test_a_late_process_killed_while_adding_its_state_leaves_nothing_for_good(
    tmp_path: Path,
) -> None:
    killed = run_launch("save_positions.py", args=[str(tmp_path), "killed"], timeout=120)
    assert killed.returncode != 0
    committed = tmp_path / "project" / "checkpoints" / "checkpoint_0"
    assert any(p.name.startswith(".rank_1.") for p in committed.iterdir())  # killed mid-add
    reload = run_python(SCRIPTS / "save_positions.py", str(tmp_path), "reload")
    assert reload.returncode == 0, reload.stderr[-3000:]
    (row,) = result_rows(reload.stdout)
    assert row["dirs"] == {"checkpoint_0": ["rank_0"]}
