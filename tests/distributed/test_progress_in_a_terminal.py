"""Progress bars under `overdrive launch` in a terminal (issue 41): each redraw goes on in
place, as without the launcher, behind the rank prefix. The demo's bar shows its schedule.

The launcher's output is a pseudo-terminal here, as in an interactive shell; into a file or a
pipe only each bar's last state is written (``test_quiet_run.py``).
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading

import pytest

from tests.helpers.dist import REPO, clean_env

pytestmark = [pytest.mark.distributed, pytest.mark.extended]  # a whole demo run


def _in_a_terminal(command: list[str]) -> tuple[int, str]:
    """Run ``command`` with stdout and stderr on one pseudo-terminal; its exit code and text."""
    master, child = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with subprocess.Popen(
        command, env=clean_env(), cwd=REPO, stdout=child, stderr=child, stdin=subprocess.DEVNULL
    ) as proc:
        os.close(child)
        code = proc.wait(timeout=600)
    reader.join(timeout=60)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def _schedule_lasts_the_run(progress: str) -> None:
    """The demo's OneCycleLR is at its floor only at the end, not from the middle on: every
    learning rate its progress bar shows before the last tenth is above 1e-4."""
    shown = [
        (int(step), float(lr))
        for step, lr in re.findall(r"\| (\d+)/176 \[[^\]]*lr=([0-9.e+-]+)\]", progress)
    ]
    early = [(step, lr) for step, lr in shown if 10 <= step <= 158]
    assert len(early) > 5, progress[-2000:]
    assert all(lr > 1e-4 for _, lr in early), early


def test_the_demo_bar_redraws_in_place_in_a_terminal() -> None:
    launch = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--num_processes", "2"]
    code, text = _in_a_terminal([*launch, str(REPO / "examples" / "digits_ddp.py")])
    assert code == 0, text[-3000:]
    redraws = re.findall(r"\r\[rank 0\] [^\r\n]*\| (\d+)/176 ", text)
    assert len(redraws) > 50, text[-3000:]  # each redraw reached the terminal, in place
    assert "\n[rank 0] held-out accuracy" in text.replace("\r\n", "\n")
    _schedule_lasts_the_run(text)
