"""A one-machine launch without restarts runs its workers without torch's elastic agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, SCRIPTS, assert_ok, clean_env

pytestmark = pytest.mark.distributed


def _drive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "launch_direct_driver.py"), *args],
        env=clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _rows(stdout: str) -> list[dict]:
    return [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]


def test_the_launcher_never_imports_torch_and_workers_see_the_agents_variables() -> None:
    done = _drive("-", str(SCRIPTS / "launch_grab_port.py"))
    assert_ok(done)
    assert "LAUNCHER_IMPORTED_TORCH False" in done.stdout
    rows = sorted(_rows(done.stdout), key=lambda r: r["rank"])
    assert [r["sum"] for r in rows] == [1.0, 1.0]
    for row in rows:
        elastic = row["elastic"]
        assert elastic["TORCHELASTIC_RUN_ID"] == "overdrive"
        assert elastic["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert elastic["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        error_file = Path(elastic["TORCHELASTIC_ERROR_FILE"])
        assert error_file.name == "error.json" and error_file.parent.name == str(row["rank"])
        assert not os.path.exists(error_file.parent)  # the launcher's folder is cleaned up


def test_a_port_taken_before_rank_0_binds_it_moves_to_a_free_port(tmp_path: Path) -> None:
    marker = tmp_path / "grabbed"
    done = _drive(str(marker), str(SCRIPTS / "launch_grab_port.py"))
    assert_ok(done)
    assert marker.exists()  # the first start did hold the port
    assert "was taken before the rendezvous could use it; using free port" in done.stderr
    rows = _rows(done.stdout)
    assert sorted(r["rank"] for r in rows) == [0, 1] and all(r["sum"] == 1.0 for r in rows)
