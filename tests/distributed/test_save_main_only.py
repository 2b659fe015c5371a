"""save_state from the main process alone (diffusers' pattern): complete and no hang where
every process holds the whole state; named with its fix where the state is sharded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("mode", ["main", "every"])
def test_ddp_save_state_from_the_main_process_alone_or_from_every_process(
    tmp_path: Path, mode: str
) -> None:
    result = run_launch("save_main_only.py", args=[str(tmp_path), mode])
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert [r["rank"] for r in rows] == [0, 1]
    assert rows[0]["same"]
    assert rows[0]["logged"] >= 6  # the main process's tracker; log() elsewhere does nothing
    if mode == "main":
        assert rows[0]["rank_dirs"] == ["rank_0"]
        assert rows[1]["alone_warning"] and not rows[0]["alone_warning"]
    else:
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
