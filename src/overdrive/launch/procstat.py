"""What Linux's /proc says about a worker: run state, CPU time and I/O, children included.

The launcher reads these a few times a second to tell a working rank from an idle one; the
worker itself does nothing for it. Elsewhere than Linux every reading is None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

try:
    _TICK = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _TICK = 100.0


@dataclass(frozen=True)
class Usage:
    """CPU seconds and bytes read or written so far, by a process and its descendants."""

    cpu_s: float
    io_bytes: int


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """The fields after the command name in /proc/<pid>/stat (the state is the first)."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    return text[text.rindex(")") + 2 :].split()


def state(pid: int) -> str | None:
    """``R``, ``S``, ``D``, ``T`` (stopped), ``Z``...; None when the process is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        text = _read(f"/proc/{pid}/task/{task}/children")
        if text:
            found += [int(word) for word in text.split()]
    return found


def _own_usage(pid: int) -> Usage | None:
    fields = _stat_fields(pid)
    if not fields or len(fields) < 15:
        return None
    # utime, stime, and the reaped children's cutime, cstime (fields 14-17 of stat).
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    io = 0
    text = _read(f"/proc/{pid}/io")
    if text:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("rchar", "wchar"):
                io += int(value)
    return Usage(ticks / _TICK, io)


def usage(pid: int) -> Usage | None:
    """Usage of ``pid`` and every live descendant (data loader workers, subprocesses)."""
    total = _own_usage(pid)
    if total is None:
        return None
    cpu, io = total.cpu_s, total.io_bytes
    todo, seen = _children(pid), {pid}
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        part = _own_usage(child)
        if part is not None:
            cpu, io = cpu + part.cpu_s, io + part.io_bytes
            todo += _children(child)
    return Usage(cpu, io)
