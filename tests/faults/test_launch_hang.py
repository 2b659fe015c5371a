"""Fault: one rank is stuck before a collective the others wait in.

The launcher must say so, with every rank's stack and the stuck rank's number, soon after the
hang timeout or the collective timeout, and a stopped (SIGSTOP) rank must not add the
launcher's whole shutdown grace to that.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, clean_env, launch_command

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).parent / "scripts" / "launch_stuck_rank.py"
STUCK_LINE = next(
    n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "STUCK-HERE" in text
)
# Generous: start-up of a launched rank on a loaded 2-core box takes seconds, not this long.
SLACK_S = 15.0


class Launch:
    """A launcher started in the background; its stderr lines are kept with arrival times."""

    def __init__(self, args: list[str], launch_args: list[str]) -> None:
        command = launch_command(SCRIPT, nprocs=2, args=args, launch_args=launch_args)
        self.proc = subprocess.Popen(
            command,
            env=clean_env(),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def finish(self, timeout: float) -> float:
        """Wait for the launcher to exit; returns the time it had exited by."""
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return time.time()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _entered(out: Path, timeout: float = 120.0) -> float:
    """When rank 0 entered the all-reduce (it writes the time just before)."""
    marker = out / "entered_0"
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert time.monotonic() < deadline, "rank 0 never reached its all-reduce"
        time.sleep(0.05)
    return float(marker.read_text())


def _stack_of(text: str, rank: int) -> list[str]:
    """The report's stack lines for one rank."""
    lines = text.splitlines()
    heads = [
        i for i, line in enumerate(lines) if line.startswith(f"overdrive: stack of rank {rank} ")
    ]
    assert heads, text
    body = []
    for line in lines[heads[0] + 1 :]:
        if not line.startswith("overdrive:     "):
            break
        body.append(line)
    return body


def test_a_rank_stuck_without_progress_is_named_with_its_stack(tmp_path: Path) -> None:
    launch = Launch([str(tmp_path), "sleep", "0"], ["--hang_timeout", "3", "--verbose"])
    try:
        entered = _entered(tmp_path)
        where = f'File "{SCRIPT}", line {STUCK_LINE} in <module>'
        deadline = entered + 3 + SLACK_S
        while not any(where in line for _, line in launch.lines):
            assert time.time() < deadline, f"no stack of the stuck rank in time:\n{launch.text()}"
            time.sleep(0.1)
        seen = next(t for t, line in launch.lines if where in line)
        assert seen - entered < 3 + SLACK_S
        finished = launch.finish(timeout=60)
    finally:
        launch.stop()
    text = launch.text()
    assert launch.proc.returncode == 1, text
    assert "hang_timeout 3s" in text.splitlines()[0]  # the banner shows the timeout in force
    assert any(where in line for line in _stack_of(text, 1)), text
    assert any("in all_reduce" in line for line in _stack_of(text, 0)), text
    assert "overdrive: rank 1 never entered the collective that rank 0 waits in" in text, text
    assert "overdrive: rank 1 hung" in text and "overdrive: rank 0 failed" not in text, text
    assert finished - entered < 3 + 2 * SLACK_S


@pytest.mark.parametrize("how", ["sleep", "sigstop"])
def test_a_collective_timeout_blames_the_rank_that_never_came(tmp_path: Path, how: str) -> None:
    """InitProcessGroupKwargs(timeout=3s): rank 0 times out, rank 1 is the cause."""
    launch = Launch([str(tmp_path), how, "3"], [])
    try:
        entered = _entered(tmp_path)
        finished = launch.finish(timeout=3 + 60)
    finally:
        launch.stop()
    text = launch.text()
    assert launch.proc.returncode == 1, text
    # The job ends at about the collective timeout, not after another shutdown grace period.
    assert finished - entered < 3 + SLACK_S, text
    assert "overdrive: rank 1 hung" in text and "overdrive: rank 0 failed" not in text, text
    if how == "sleep":
        where = f'File "{SCRIPT}", line {STUCK_LINE} in <module>'
        assert any(where in line for line in _stack_of(text, 1)), text
        assert "overdrive: rank 1 never entered the collective that rank 0 waits in" in text
    else:
        assert "overdrive: rank 1 is stopped (SIGSTOP)" in text, text
