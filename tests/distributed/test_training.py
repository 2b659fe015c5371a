"""One training script, three ways to start it: `overdrive launch`, torchrun, plain python.

The script (scripts/train_equivalence.py) holds the checks; see its docstring.
"""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.helpers.dist import REPO, SCRIPTS, assert_ok, clean_env, run_launch

SCRIPT = SCRIPTS / "train_equivalence.py"


def _free_port() -> int:
    """A port for torchrun's rendezvous (the default 29500 may be taken by a parallel run)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_training_semantics_under_overdrive_launch() -> None:
    result = run_launch(SCRIPT, nprocs=2)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=2" in result.stdout
    assert result.stdout.count("ALL CHECKS PASSED") == 1  # accelerator.print: main only


def test_training_semantics_on_three_processes() -> None:
    # W = 3: the short last batch is padded unevenly (3 real samples for 6 slots)
    result = run_launch(SCRIPT, nprocs=3)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=3" in result.stdout


def test_training_semantics_under_torchrun() -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        str(SCRIPT),
    ]
    result = subprocess.run(
        cmd, env=clean_env(), capture_output=True, text=True, timeout=180, cwd=REPO
    )
    assert_ok(result)
    assert "ALL CHECKS PASSED world=2" in result.stdout


def test_training_semantics_under_plain_python() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert_ok(result)
    assert "ALL CHECKS PASSED world=1" in result.stdout
