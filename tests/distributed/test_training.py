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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_training_semantics_under_overdrive_launch() -> None:
    result = run_launch(SCRIPT, nprocs=2)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=2" in result.stdout


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
