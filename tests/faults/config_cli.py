"""Run the `overdrive` CLI as a user would, bounded in time and memory (config fault tests)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.dist import REPO, clean_env

# A config fault must fail in seconds; a hang or a runaway allocation must fail the test, not
# the machine: the child gets a wall-clock limit and an address-space limit.
TIME_LIMIT_S = 60.0
MEMORY_LIMIT_BYTES = 3 * 1024**3


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if "error:" in line]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def overdrive(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str = "",
) -> Outcome:
    """``python -m overdrive ARGS`` with a clean environment and no GPU visible."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=clean_env(env),
        cwd=cwd or REPO,
        timeout=TIME_LIMIT_S,
        preexec_fn=_limit_memory,
    )
    return Outcome(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def assert_clean_refusal(outcome: Outcome, *, within_s: float = 30.0) -> str:
    """Exit code 2, quickly, one error (message and fix lines), no traceback; the message."""
    assert outcome.returncode == 2, (outcome.returncode, outcome.stderr[-2000:])
    assert outcome.seconds < within_s, outcome.seconds
    assert "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
    assert len(outcome.error_lines) == 1, outcome.stderr[-2000:]
    assert outcome.stderr.startswith("overdrive: error: "), outcome.stderr[:500]
    return outcome.stderr
