"""Worker failures: the error file a worker writes, and the report the launcher prints.

The file keeps the layout torch's elastic agent reads (``message.extraInfo``), so the agent
parses it as its own; overdrive's fields sit beside it with a nanosecond timestamp that
orders failures across ranks.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
# Signals the launcher itself sends when it stops the other ranks.
_STOP_SIGNALS = {signal.SIGTERM.value, signal.SIGINT.value, signal.SIGHUP.value}


def write_error_file(summary: str, traceback_text: str, environ: Mapping[str, str]) -> None:
    """Record this worker's failure where the agent expects it (no-op outside a launch)."""
    path = environ.get(ERROR_FILE_VARIABLE)
    if not path:
        return
    data = {
        "message": {
            "message": summary,
            "extraInfo": {"py_callstack": traceback_text, "timestamp": str(int(time.time()))},
        },
        "overdrive": {
            "rank": environ.get("RANK", "?"),
            "summary": summary,
            "traceback": traceback_text,
            "time_ns": time.time_ns(),
        },
    }
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except OSError:
        pass  # the traceback is on stderr already; losing the copy must not mask the error


@dataclass(frozen=True)
class Failure:
    """One worker that did not finish cleanly."""

    rank: int
    local_rank: int
    pid: int
    exitcode: int
    summary: str | None = None
    traceback: str | None = None
    time_ns: int | None = None

    @property
    def signal_name(self) -> str | None:
        if self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    def how(self) -> str:
        """``exit code 1`` or ``killed by SIGSEGV``."""
        name = self.signal_name
        return f"killed by {name}" if name else f"exit code {self.exitcode}"


def read_error_data(error_file: str | None) -> dict[str, Any]:
    """The overdrive part of a worker's error file, or {} when there is none."""
    if not error_file or not os.path.isfile(error_file):
        return {}
    try:
        with open(error_file, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    part = data.get("overdrive") if isinstance(data, dict) else None
    return part if isinstance(part, dict) else {}


def failure_from_parts(
    rank: int | None, local_rank: int, pid: int, exitcode: int, error_file: str | None
) -> Failure:
    """A Failure from what the agent knows plus the worker's error file (rank read from it
    when ``rank`` is None)."""
    data = read_error_data(error_file)
    if rank is None:
        written = str(data.get("rank", ""))
        rank = int(written) if written.isdigit() else -1
    return Failure(
        rank=rank,
        local_rank=local_rank,
        pid=pid,
        exitcode=exitcode,
        summary=data.get("summary"),
        traceback=data.get("traceback"),
        time_ns=data.get("time_ns"),
    )


def root_cause(failures: list[Failure]) -> Failure:
    """The failure that most likely started it.

    A crash by a signal the launcher does not send (segfault, OOM kill) comes first, since it
    leaves no traceback and makes its peers raise; then the earliest recorded traceback; then
    a plain non-zero exit; ranks the launcher stopped come last.
    """

    def order(f: Failure) -> tuple[int, int, int]:
        if f.exitcode < 0 and -f.exitcode not in _STOP_SIGNALS:
            kind = 0
        elif f.traceback is not None:
            kind = 1
        elif f.exitcode > 0:
            kind = 2
        else:
            kind = 3
        return (kind, f.time_ns if f.time_ns is not None else 0, f.rank)

    return min(failures, key=order)


def format_report(failures: list[Failure], *, nproc: int, restarts: int = 0) -> str:
    """The launcher's closing words: who failed and why, the traceback last."""
    cause = root_cause(failures)
    others = [f for f in failures if f is not cause]
    head = f"overdrive: rank {cause.rank} failed ({cause.how()}, pid {cause.pid})"
    if nproc > 1:
        head += f"; the other {nproc - 1} process(es) on this machine were stopped"
    if restarts:
        head += f"; the group had been restarted {restarts} time(s)"
    lines = [head + "."]
    for other in sorted(others, key=lambda f: f.rank):
        if other.summary:
            first = other.summary.splitlines()[0]
            short = first if len(first) <= 160 else first[:157] + "..."
            lines.append(f"overdrive: rank {other.rank} also failed: {short}")
    if cause.traceback:
        lines.append(f"overdrive: traceback of rank {cause.rank}:")
        lines.append(cause.traceback.rstrip("\n"))
    else:
        lines.append(
            f"overdrive: rank {cause.rank} left no Python traceback ({cause.how()}); "
            "its own output above may say why."
        )
    return "\n".join(lines)
