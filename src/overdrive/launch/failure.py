"""Worker failures: the error file a worker writes, and the report the launcher prints.

The file keeps the layout torch's elastic agent reads (``message.extraInfo``), so the agent
parses it as its own; overdrive's fields sit beside it with a nanosecond timestamp. With the
exit times the launcher sees, that orders failures in time: the first rank to fail is the
cause, ranks the launcher stopped never are.

Each failure is told once: a worker prints its own traceback as it fails (unless its error only
says that a peer went away: that is a consequence, said in one line of the report), and the
report repeats no traceback already printed. A script that ends with ``sys.exit(n)`` (argparse
does, with 2) leaves no traceback: its own message says why, and the launcher exits with ``n``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
# Signals the launcher itself sends when it stops the other ranks (SIGKILL after a grace).
_STOP_SIGNALS = {s.value for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL)}
_STOPPED_TAG = " (stopped by the launcher)"
# Errors a rank raises because a peer went away or failed first: effects, not causes.
_LOST_PEER = (
    "connection reset by peer",
    "connection closed by peer",
    "broken pipe",
    "remote process exited",
    "communicator was aborted",
    "failed on process 0:",  # a collective step of overdrive's that process 0 could not do
    "failed on the main process:",
)
# With a peer that never answered (a timeout may also be the rank's own).
_PEER_ERRORS = (*_LOST_PEER, "timed out", "timeout")


def lost_a_peer(summary: str) -> bool:
    """The error only says that another process went away or failed (its traceback helps
    nobody: the other process's own error says why)."""
    text = summary.lower()
    return any(mark in text for mark in _LOST_PEER)


def write_error_file(
    summary: str,
    traceback_text: str | None,
    environ: Mapping[str, str],
    *,
    printed: bool = True,
    exit_code: int | None = None,
) -> None:
    """Record this worker's failure where the agent expects it (no-op outside a launch):
    ``printed`` says whether the worker printed the traceback itself; ``exit_code`` marks a
    ``sys.exit(n)`` (no traceback)."""
    path = environ.get(ERROR_FILE_VARIABLE)
    if not path:
        return
    data = {
        "message": {
            "message": summary,
            "extraInfo": {"py_callstack": traceback_text or "", "timestamp": str(int(time.time()))},
        },
        "overdrive": {
            "rank": environ.get("RANK", "?"),
            "summary": summary,
            "traceback": traceback_text,
            "printed": printed,
            "exit_code": exit_code,
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
    printed: bool = True  # the worker printed its traceback itself
    exited: bool = False  # the script ended with sys.exit(n): no traceback, its own message

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
        printed=data.get("printed", True) is not False,
        exited=data.get("exit_code") is not None,
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
    stopped: Collection[int] | None = None,
) -> list[str]:
    """One line per rank: its exit status, and whether it was the cause or was stopped.

    After a hang (``hang_tag`` gives each rank's part in it) the launcher stopped every rank.
    ``stopped``: the local ranks the launcher signalled, when it knows them.
    """
    failed = {f.local_rank: f for f in failures}
    rows: dict[int, tuple[int, str]] = {}
    for end in exits:
        told = stopped is not None and end.local_rank in stopped and end.exitcode == 0
        rows[end.local_rank] = (end.rank, how(end.exitcode) + (_STOPPED_TAG if told else ""))
    for f in failures:
        tags = []
        if hang_tag is not None:
            tags.append(hang_tag(f.rank))
            if f.exitcode < 0 and -f.exitcode in _STOP_SIGNALS:
                tags.append("stopped by the launcher")
        elif f is cause:
            tags.append("first to fail")
        else:
            raised = f"raised {brief(f.summary)}" if f.summary and not f.exited else ""
            if stopped_by_launcher(f, failures):  # what it raised, in the same line
                tags.append("stopped by the launcher" + (f" after it {raised}" if raised else ""))
            elif raised:
                tags.append(f"it {raised}")
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


def brief(summary: str) -> str:
    """The error in a few words: ``RuntimeError: ... Connection closed by peer ...`` for a
    lost peer, else its first line (cut at 120 characters)."""
    first = summary.strip().splitlines()[0] if summary.strip() else summary
    kind, colon, rest = first.partition(": ")
    if colon and "." in kind and " " not in kind:  # a.b.SomeError: the class name is enough
        first = f"{kind.rsplit('.', 1)[-1]}: {rest}"
    lower = first.lower()
    for mark in _PEER_ERRORS:
        at = lower.find(mark)
        if at >= 0 and len(first) > 120:
            kind = first.split(":", 1)[0] if ":" in first[:at] else "error"
            return f"{kind}: ... {first[at : at + len(mark)]} ..."
    return first if len(first) <= 120 else first[:117] + "..."


def _headline(cause: Failure, nproc: int, restarts: int, stopped: int) -> str:
    """The first line: who failed, how, and where its own words are."""
    where = f"pid {cause.pid}"
    if cause.exited:
        head = f"overdrive: rank {cause.rank} ended with exit code {cause.exitcode} ({where})"
    elif cause.traceback:
        head = f"overdrive: rank {cause.rank} failed ({cause.how()}, {where}): "
        head += brief(cause.summary or "") if cause.summary else "see its traceback"
        head += "; its traceback is above" if cause.printed else "; its traceback follows"
    else:
        head = (
            f"overdrive: rank {cause.rank} failed ({cause.how()}, {where}) and left no Python "
            "traceback; its own output above may say why"
        )
    if stopped:  # ranks that failed on their own say so in their lines below
        head += f"; the other {stopped} process(es) on this machine were stopped"
    if restarts:
        head += f"; the group had been restarted {restarts} time(s)"
    return head + "."


def _stopped_count(
    failures: list[Failure],
    cause: Failure,
    nproc: int,
    exits: list[RankExit],
    stopped: Collection[int] | None,
) -> int:
    """Ranks the launcher stopped: those it signalled when it knows them (one that handled the
    signal and exited 0 included), else those failed by its stop signal or not seen to end on
    their own (a rank that failed by itself, or ended well before the failure, was not)."""
    if stopped is not None:
        return len(set(stopped) - {cause.local_rank})
    by_signal = sum(stopped_by_launcher(f, failures) for f in failures if f is not cause)
    failed = {f.local_rank for f in failures}
    ended_well = {e.local_rank for e in exits if e.exitcode == 0} - failed
    unseen = nproc - len(failed) - len(ended_well)
    return by_signal + max(unseen, 0)


def format_report(
    failures: list[Failure],
    *,
    nproc: int,
    restarts: int = 0,
    exits: Iterable[RankExit] = (),
    stopped: Collection[int] | None = None,
) -> str:
    """The launcher's closing words: who failed first and why, then one line per rank; the
    first failure's traceback only when its worker did not print it already."""
    cause = root_cause(failures)
    exits = list(exits)
    count = _stopped_count(failures, cause, nproc, exits, stopped)
    lines = [_headline(cause, nproc, restarts, count)]
    if nproc > 1:
        lines += exit_status_lines(failures, exits, cause, stopped=stopped)
    if cause.traceback and not cause.printed:
        lines.append(f"overdrive: traceback of rank {cause.rank}:")
        lines.append(cause.traceback.rstrip("\n"))
    return "\n".join(lines)


def exit_code(failures: list[Failure]) -> int:
    """The launcher's exit code: the first failure's own exit code when it exited (a
    ``sys.exit(2)`` from argparse gives 2), else 1."""
    cause = root_cause(failures)
    return cause.exitcode if 0 < cause.exitcode < 256 else 1
