"""The files a launched worker shares with its launcher's watchdog, and the worker's side.

In the folder named by ``OVERDRIVE_LAUNCH_DIR`` each rank writes ``rank_<R>.pid`` (its pid,
main thread, local rank and restart count) once it can print its stack on request: ``STACK_SIGNAL`` makes
``faulthandler`` append every thread's Python stack to ``rank_<R>.stack``, from a C signal
handler, so it answers while blocked inside a collective. A rank whose collective timed out
writes ``timeout_<R>_<pid>`` and waits (a few seconds at most) for ``<that name>.done``, so
its peers are still alive when the launcher asks for their stacks.

Nothing here runs per training step: the cost is one open file and one signal handler.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import threading
import time
import traceback
from collections.abc import Mapping
from typing import IO, Any

LAUNCH_DIR_VARIABLE = "OVERDRIVE_LAUNCH_DIR"
# A real-time signal: SIGUSR1/2 often belong to the user's code or the scheduler (SLURM).
STACK_SIGNAL: int | None = (
    signal.SIGRTMIN + 2 if hasattr(signal, "SIGRTMIN") and os.name == "posix" else None
)
# How long a rank whose collective timed out waits for the launcher to read every stack.
TIMEOUT_ACK_WAIT_S = 10.0
_FRAMES_SKIPPED = (
    "<frozen runpy>",
    "runpy.py",
    os.path.join("overdrive", "launch", "bootstrap.py"),
)

_stack_file: IO[str] | None = None  # kept open for faulthandler for the life of the process


def pid_file(launch_dir: str, rank: int) -> str:
    return os.path.join(launch_dir, f"rank_{rank}.pid")


def stack_file(launch_dir: str, rank: int) -> str:
    return os.path.join(launch_dir, f"rank_{rank}.stack")


def timeout_request(launch_dir: str, rank: int, pid: int) -> str:
    return os.path.join(launch_dir, f"timeout_{rank}_{pid}")


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def register_worker(environ: Mapping[str, str]) -> None:
    """Let the launcher ask this process for its stack (no-op outside ``overdrive launch``)."""
    global _stack_file
    launch_dir, rank = environ.get(LAUNCH_DIR_VARIABLE), environ.get("RANK", "")
    if not launch_dir or not rank.isdigit() or STACK_SIGNAL is None:
        return
    try:
        _stack_file = open(stack_file(launch_dir, int(rank)), "w", encoding="utf-8")  # noqa: SIM115
        faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)
        main = threading.main_thread().ident or 0
        local = environ.get("LOCAL_RANK", "-1")
        attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        line = f"{os.getpid()} {main} {local} {attempt}\n"
        _write_atomically(pid_file(launch_dir, int(rank)), line)
    except (OSError, RuntimeError, ValueError):
        return  # the launcher then reports this rank without a stack


def is_collective_timeout(exc: BaseException) -> bool:
    """A torch.distributed collective (or DDP's all-reduce in backward) that timed out."""
    name, text = type(exc).__name__.lower(), str(exc).lower()
    if not any(word in part for word in ("timed out", "timeout") for part in (name, text)):
        return False
    if any(word in f"{name} {text}" for word in ("gloo", "nccl", "c10d", "collective")):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return any(in_torch_distributed(frame.filename) for frame in frames)


def in_torch_distributed(filename: str) -> bool:
    path = filename.replace(os.sep, "/")
    return "/torch/distributed/" in path or "/torch/nn/parallel/" in path


def stack_lines_of(exc: BaseException) -> list[str]:
    """The exception's frames as faulthandler prints them, most recent call first."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not skipped_frame(f.filename)]
    return [f'  File "{f.filename}", line {f.lineno} in {f.name}' for f in reversed(frames)]


def skipped_frame(filename: str) -> bool:
    return any(filename.endswith(skip) or filename == skip for skip in _FRAMES_SKIPPED)


def report_collective_timeout(
    exc: BaseException, summary: str, environ: Mapping[str, str], wait_s: float = TIMEOUT_ACK_WAIT_S
) -> None:
    """After a collective timed out here: ask the launcher for every rank's stack, and wait
    until it has them (the peers are stopped once this process exits)."""
    launch_dir, rank = environ.get(LAUNCH_DIR_VARIABLE), environ.get("RANK", "")
    if not launch_dir or not rank.isdigit() or not is_collective_timeout(exc):
        return
    path = timeout_request(launch_dir, int(rank), os.getpid())
    data: dict[str, Any] = {"summary": summary, "stack": stack_lines_of(exc)}
    try:
        _write_atomically(path, json.dumps(data))
    except OSError:
        return
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path + ".done") and time.monotonic() < deadline:
        time.sleep(0.05)
