"""Worker failures: the error file a worker writes, and the report the launcher prints.

The file keeps the layout torch's elastic agent reads (``message.extraInfo``), so the agent
parses it as its own; overdrive's fields sit beside it with a nanosecond timestamp. With the
exit times the launcher sees, that orders failures in time: the first rank to fail is the
cause, ranks the launcher stopped never are.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
# Signals the launcher itself sends when it stops the other ranks (SIGKILL after a grace).
_STOP_SIGNALS = {s.value for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL)}
# Errors a rank raises because a peer left or never came: effects, not causes.
_PEER_ERRORS = (
    "connection reset by peer",
    "connection closed by peer",
    "broken pipe",
    "timed out",
    "timeout",
    "remote process exited",
    "communicator was aborted",
)


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
    time_ns: int | None = None  # when it raised (its error file), worker's clock
    exit_ns: int | None = None  # when the process ended, as the launcher saw it

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.exitcode)

    def how(self) -> str:
        """``exit code 1`` or ``killed by SIGSEGV``."""
        return how(self.exitcode)

    @property
    def failed_ns(self) -> int | None:
        """When it failed: when it raised, else when it ended; None if neither is known."""
        return self.time_ns if self.time_ns is not None else self.exit_ns

    @property
    def blames_a_peer(self) -> bool:
        """Its error says a peer left or never answered (an effect of another failure)."""
        text = (self.summary or "").lower()
        return self.traceback is not None and any(mark in text for mark in _PEER_ERRORS)


def signal_name(exitcode: int) -> str | None:
    """``SIGTERM`` for ``-15``; None for a normal exit code."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def how(exitcode: int) -> str:
    """``exit code 1`` or ``killed by SIGSEGV``."""
    name = signal_name(exitcode)
    return f"killed by {name}" if name else f"exit code {exitcode}"


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
    rank: int | None,
    local_rank: int,
    pid: int,
    exitcode: int,
    error_file: str | None,
    exit_ns: int | None = None,
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
        exit_ns=exit_ns,
    )


def stopped_by_launcher(failure: Failure, failures: Iterable[Failure]) -> bool:
    """Whether the launcher's own stop signal ended this rank, after another rank failed.

    With exit times: killed by a stop signal after the first rank ended. Without: killed by a
    stop signal while another rank failed some other way.
    """
    if failure.exitcode >= 0 or -failure.exitcode not in _STOP_SIGNALS:
        return False
    others = [f for f in failures if f is not failure]
    ends = [f.exit_ns for f in others if f.exit_ns is not None]
    if failure.exit_ns is not None and ends:
        return failure.exit_ns > min(ends)
    return any(f.exitcode >= 0 or -f.exitcode not in _STOP_SIGNALS for f in others)


def _kind(failure: Failure) -> int:
    """Without times: a crash with no Python error first, then a traceback, then an exit."""
    if failure.exitcode < 0 and failure.traceback is None:
        return 0
    if failure.traceback is not None:
        return 1
    return 2


def root_cause(failures: list[Failure]) -> Failure:
    """The failure that started it: the first in time among the ranks that were not stopped by
    the launcher, errors that only report a lost peer last.

    When some failure's time is unknown, a crash without a traceback (segfault, OOM kill)
    comes first, since it makes its peers raise; then the earliest traceback; then a plain
    non-zero exit.
    """
    candidates = [f for f in failures if not stopped_by_launcher(f, failures)] or failures
    own = [f for f in candidates if not f.blames_a_peer] or candidates
    if all(f.failed_ns is not None for f in own):
        return min(own, key=lambda f: (f.failed_ns, f.rank))
    return min(own, key=lambda f: (_kind(f), f.failed_ns or 0, f.rank))


@dataclass(frozen=True)
class RankExit:
    """How one local rank ended, failed or not."""

    rank: int
    local_rank: int
    exitcode: int


def exit_status_lines(
    failures: list[Failure],
    exits: Iterable[RankExit],
    cause: Failure | None,
    hang_tag: Callable[[int], str] | None = None,
) -> list[str]:
    """One line per rank: its exit status, and whether it was the cause or was stopped.

    After a hang (``hang_tag`` gives each rank's part in it) the launcher stopped every rank.
    """
    failed = {f.local_rank: f for f in failures}
    rows: dict[int, tuple[int, str]] = {}
    for end in exits:
        rows[end.local_rank] = (end.rank, how(end.exitcode))
    for f in failures:
        tags = []
        if hang_tag is not None:
            tags.append(hang_tag(f.rank))
            if f.exitcode < 0 and -f.exitcode in _STOP_SIGNALS:
                tags.append("stopped by the launcher")
        elif f is cause:
            tags.append("first to fail")
        elif stopped_by_launcher(f, failures):
            tags.append("stopped by the launcher")
        tags = [t for t in tags if t]
        rows[f.local_rank] = (f.rank, f.how() + (f" ({'; '.join(tags)})" if tags else ""))
    lines = ["overdrive: exit status of every rank on this machine:"]
    for local in sorted(rows, key=lambda k: (rows[k][0], k)):
        rank, status = rows[local]
        if local not in failed and rank < 0:
            lines.append(f"overdrive:   local rank {local}: {status}")
        else:
            lines.append(f"overdrive:   rank {rank}: {status}")
    return lines


def format_report(
    failures: list[Failure],
    *,
    nproc: int,
    restarts: int = 0,
    exits: Iterable[RankExit] = (),
) -> str:
    """The launcher's closing words: who failed and why, every rank's status, the traceback
    last."""
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
    if nproc > 1:
        lines += exit_status_lines(failures, exits, cause)
    if cause.traceback:
        lines.append(f"overdrive: traceback of rank {cause.rank}:")
        lines.append(cause.traceback.rstrip("\n"))
    else:
        lines.append(
            f"overdrive: rank {cause.rank} left no Python traceback ({cause.how()}); "
            "its own output above may say why."
        )
    return "\n".join(lines)
