"""A one-machine launch without restarts runs its workers without torch's elastic agent."""

from __future__ import annotations

import json
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
    first_port = done.stdout.split("FIRST_PORT ")[1].split()[0]
    assert first_port != "29500"  # the default port is replaced by a free one
    rows = sorted(_rows(done.stdout), key=lambda r: r["rank"])
    assert [r["sum"] for r in rows] == [1.0, 1.0]
    for rank, row in enumerate(rows):
        env = row["elastic"]
        error_file = Path(env.pop("TORCHELASTIC_ERROR_FILE"))
        assert env == {  # what torch's elastic agent sets on one machine, static rendezvous
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "GROUP_RANK": "0",
            "ROLE_RANK": str(rank),
            "ROLE_NAME": "worker",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_WORLD_SIZE": "1",
            "ROLE_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "overdrive",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        }
        assert row["port"] == first_port
        assert error_file.parts[-4:] == ("overdrive", "attempt_0", str(rank), "error.json")


def test_a_port_taken_before_rank_0_binds_it_moves_to_a_free_port(tmp_path: Path) -> None:
    marker = tmp_path / "grabbed"
    done = _drive(str(marker), str(SCRIPTS / "launch_grab_port.py"))
    assert_ok(done)
    assert marker.exists()  # the first start did hold the port
    first_port = done.stdout.split("FIRST_PORT ")[1].split()[0]
    note = f"port {first_port} was taken before the rendezvous could use it; using free port"
    assert note in done.stderr and "the script starts again" in done.stderr
    rows = _rows(done.stdout)
    assert sorted(r["rank"] for r in rows) == [0, 1] and all(r["sum"] == 1.0 for r in rows)
    assert {r["port"] for r in rows} != {first_port} and len({r["port"] for r in rows}) == 1
