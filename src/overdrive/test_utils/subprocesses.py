"""Run a command from a test: its output streamed and kept, a failure raised with it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import overdrive


class SubprocessCallException(Exception):
    """``run_command``'s command exited non-zero; the message holds its output."""


@dataclass
class RunOutput:
    """A finished command: exit status and its output lines (newlines stripped)."""

    returncode: int
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def _tee(pipe: IO[bytes], sink: list[str], echo_to: IO[str] | None, label: str) -> None:
    for raw in iter(pipe.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip()
        sink.append(line)
        if echo_to is not None:
            print(label, line, file=echo_to)
    pipe.close()


def execute_subprocess_async(
    cmd: list[Any],
    env: dict[str, str] | None = None,
    stdin: Any = None,
    timeout: float | None = 180,
    quiet: bool = False,
    echo: bool = True,
) -> RunOutput:
    """Run ``cmd``, printing its lines as they come (unless ``quiet``); raise ``RuntimeError``
    with its stderr when it exits with a positive status."""
    args = [str(part) for part in cmd]
    if echo:
        print("\nRunning: ", " ".join(args))
    proc = subprocess.Popen(
        args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    result = RunOutput(returncode=0)
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(
            target=_tee, args=(proc.stdout, result.stdout, None if quiet else sys.stdout, "stdout:")
        ),
        threading.Thread(
            target=_tee, args=(proc.stderr, result.stderr, None if quiet else sys.stderr, "stderr:")
        ),
    ]
    for reader in readers:
        reader.start()
    try:
        result.returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        for reader in readers:
            reader.join()
        raise RuntimeError(f"'{' '.join(args)}' did not finish within {timeout} s") from None
    for reader in readers:
        reader.join()
    if result.returncode > 0:
        stderr = "\n".join(result.stderr)
        raise RuntimeError(
            f"'{' '.join(args)}' failed with returncode {result.returncode}\n\n"
            f"The combined stderr from workers follows:\n{stderr}"
        )
    return result


def run_command(
    command: list[Any], return_stdout: bool = False, env: dict[str, str] | None = None
) -> str | None:
    """Run ``command`` (stderr folded into stdout); return its text when ``return_stdout``;
    raise ``SubprocessCallException`` with the output when it fails."""
    args = [str(part) for part in command]
    try:
        output = subprocess.check_output(
            args, stderr=subprocess.STDOUT, env=os.environ.copy() if env is None else env
        )
    except subprocess.CalledProcessError as exc:
        raise SubprocessCallException(
            f"Command `{' '.join(args)}` failed with the following error:\n\n{exc.output.decode()}"
        ) from exc
    return output.decode("utf-8") if return_stdout else None


def path_in_accelerate_package(*components: str) -> Path:
    """A path inside the installed package's folder (here: overdrive's)."""
    return Path(overdrive.__file__).parent.joinpath(*components)
