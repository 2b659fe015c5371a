"""The launcher's watch over its workers: exit times, hangs, stacks on request.

One thread, a few readings of /proc per second (nothing in the workers, nothing per step):

- when each worker ended (``waitid`` without reaping, so the launcher still reaps it): the
  failure report orders failures in time with it;
- no progress: when no rank has used the CPU or done I/O for ``hang_timeout`` seconds, every
  rank's stack is printed, the ranks that never entered the collective the others wait in are
  named, and the job is stopped;
- a rank whose collective timed out asks for the same report before it exits;
- a rank stopped by SIGSTOP cannot act on the launcher's SIGTERM (which then waits 30 s
  before SIGKILL): once any rank has failed, a stopped rank is killed at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from overdrive.launch import procstat, rankfiles
from overdrive.launch.failure import RankExit, how
from overdrive.launch.stacks import HangReport, RankState, in_collective, main_stack

# A rank progresses when it used more than this share of one core since it last did ...
BUSY_SHARE = 0.05
# ... plus this much CPU time (an idle Python process still wakes now and then).
IDLE_NOISE_S = 0.03
# How long the launcher waits for the ranks' stack dumps.
STACK_WAIT_S = 3.0
# After stopping a hung job, SIGKILL whatever still runs after this long.
KILL_AFTER_S = 5.0


def available() -> bool:
    """Whether this system offers what the watchdog reads (Linux /proc, a stack signal)."""
    return os.path.isdir("/proc/self/task") and rankfiles.STACK_SIGNAL is not None


@dataclass
class _Rank:
    """One worker process the launcher saw register."""

    rank: int
    pid: int
    main_ident: int
    local_rank: int
    last_progress: float  # time.monotonic()
    ref_time: float
    ref_cpu: float = 0.0
    ref_io: int = -1
    exitcode: int | None = None
    exit_ns: int | None = None
    ended: bool = False


class Watchdog:
    """Watches the workers of one launch through ``launch_dir`` (see ``rankfiles``)."""

    def __init__(
        self,
        launch_dir: str,
        *,
        nproc: int,
        hang_timeout: float,
        hang_label: str,
        say: Callable[[str], None],
    ) -> None:
        self.launch_dir = launch_dir
        self.nproc = nproc
        self.hang_timeout = hang_timeout
        self.hang_label = hang_label
        self.say = say
        self.hang: HangReport | None = None
        # New workers and timeout requests are looked for every tick; /proc is read less often.
        self.sample_every = min(1.0, max(0.1, hang_timeout / 10)) if hang_timeout > 0 else 1.0
        self.tick = min(0.2, self.sample_every)
        self._sampled = 0.0
        self._attempt = -1
        self._ranks: dict[int, _Rank] = {}
        self._exit_threads: list[threading.Thread] = []
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="overdrive-watchdog", daemon=True)
        self._answered: set[str] = set()
        self._stopped_at: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; the workers have ended, so their exit times are all in (or soon)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=STACK_WAIT_S + 2)
        deadline = time.monotonic() + 1.0
        for thread in list(self._exit_threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ what the report needs
    def exit_ns(self, pid: int) -> int | None:
        """When the worker with this pid ended, if the watchdog saw it."""
        with self._lock:
            return next((r.exit_ns for r in self._ranks.values() if r.pid == pid), None)

    def exits(self) -> list[RankExit]:
        """How every rank the watchdog knows ended (failed ones too)."""
        with self._lock:
            return [
                RankExit(r.rank, r.local_rank, r.exitcode if r.exitcode is not None else 0)
                for r in self._ranks.values()
                if r.ended
            ]

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while not self._done.wait(self.tick):
            try:
                self._discover()
                self._answer_timeouts()
                if time.monotonic() - self._sampled >= self.sample_every:
                    self._sampled = time.monotonic()
                    self._check_progress()
                self._finish_stopping()
            except Exception as error:  # noqa: BLE001 - the watchdog must never end the launch
                self.say(f"overdrive: note: the hang watchdog stopped: {error!r}")
                return

    def _discover(self) -> None:
        for entry in os.scandir(self.launch_dir):
            name = entry.name
            if not (name.startswith("rank_") and name.endswith(".pid")):
                continue
            try:
                rank = int(name[len("rank_") : -len(".pid")])
                with open(entry.path, encoding="ascii") as handle:
                    pid, ident, local, attempt = (int(word) for word in handle.read().split())
            except (OSError, ValueError):
                continue
            known = self._ranks.get(rank)
            if attempt < self._attempt or (known is not None and known.pid == pid):
                continue
            if attempt > self._attempt:  # the first group, or a restarted one: start over
                with self._lock:
                    self._ranks = {}
                self._attempt, self.hang, self._stopped_at = attempt, None, None
            now = time.monotonic()
            record = _Rank(rank, pid, ident, local, last_progress=now, ref_time=now)
            with self._lock:
                self._ranks[rank] = record
            if hasattr(os, "waitid"):
                thread = threading.Thread(target=self._await_exit, args=(record,), daemon=True)
                self._exit_threads.append(thread)
                thread.start()

    def _await_exit(self, record: _Rank) -> None:
        """Block until the worker ends; note when and how, leaving it for the launcher to reap."""
        code: int | None = None
        seen: int | None = None
        try:
            info = os.waitid(os.P_PID, record.pid, os.WEXITED | os.WNOWAIT)
            seen = time.time_ns()
            if info is not None:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        except (ChildProcessError, OSError):
            pass  # the launcher reaped it first: when it ended is unknown
        with self._lock:
            record.exit_ns, record.exitcode, record.ended = seen, code, True
            record.last_progress = time.monotonic()
        if code != 0:
            self._kill_stopped()

    # ------------------------------------------------------------------ hangs
    def _live(self) -> list[_Rank]:
        with self._lock:
            return [r for r in self._ranks.values() if not r.ended]

    def _check_progress(self) -> None:
        if self.hang_timeout <= 0 or self.hang is not None or self._stopped_at is not None:
            return
        with self._lock:
            ranks = list(self._ranks.values())
        if len(ranks) < self.nproc or any(r.ended and r.exitcode not in (0, None) for r in ranks):
            return  # still starting, or failing (the agent is on it)
        now = time.monotonic()
        for record in ranks:
            if not record.ended:
                _note_progress(record, now)
        quiet = now - max(r.last_progress for r in ranks)
        if quiet >= self.hang_timeout and self._live():
            reason = f"no rank made progress for {int(quiet)}s ({self.hang_label})"
            self.hang = self._collect(reason, {})
            self.say(
                self.hang.detail()
                + "\noverdrive: stopping the job; if it may sit this long without using a CPU, "
                "raise --hang_timeout (0 turns the check off)."
            )
            self._stop_job()

    def _answer_timeouts(self) -> None:
        requests = self._timeout_requests()
        fresh = [path for path in requests if path not in self._answered]
        if not fresh:
            return
        if self.hang is None:
            ranks = sorted({rank for rank, _ in requests.values()})
            reason = (
                f"the collective of rank {ranks[0]} timed out"
                if len(ranks) == 1
                else f"the collectives of ranks {', '.join(map(str, ranks))} timed out"
            )
            self.hang = self._collect(reason, dict(requests.values()))
            self.say(self.hang.detail())
            self._kill_stopped()
        for path in fresh:
            self._answered.add(path)
            try:
                with open(path + ".done", "w", encoding="ascii"):
                    pass
            except OSError:
                pass

    def _timeout_requests(self) -> dict[str, tuple[int, dict]]:
        """``{path: (rank, request)}`` of the current ranks whose collective timed out."""
        found: dict[str, tuple[int, dict]] = {}
        with self._lock:
            current = {(str(r.rank), str(r.pid)) for r in self._ranks.values()}
        for entry in os.scandir(self.launch_dir):
            parts = entry.name.split("_")
            if len(parts) != 3 or parts[0] != "timeout" or (parts[1], parts[2]) not in current:
                continue
            try:
                with open(entry.path, encoding="utf-8") as handle:
                    found[entry.path] = (int(parts[1]), json.load(handle))
            except (OSError, ValueError):
                continue
        return found

    def _collect(self, reason: str, timed_out: dict[int, dict]) -> HangReport:
        """Every rank's state and stack (the ones that can answer are asked)."""
        with self._lock:
            ranks = sorted(self._ranks.values(), key=lambda r: r.rank)
        states, asked = [], []
        for record in ranks:
            state = RankState(record.rank)
            states.append(state)
            if record.ended:
                state.ended = how(record.exitcode) if record.exitcode is not None else "exited"
            elif record.rank not in timed_out:
                state.state = procstat.state(record.pid) or "gone"
                state.stopped = state.state == "T"
                if not state.stopped:
                    asked.append((record, state))
        dumps = self._dump_stacks([record for record, _ in asked])
        for record, state in asked:
            stack = main_stack(dumps.get(record.rank, ""), record.main_ident)
            state.stack = stack
            state.waiting = stack is not None and in_collective(stack)
        # A rank that timed out meanwhile answered from its wait for us: use its request.
        timed_out = {**{r: d for r, d in self._timeout_requests().values()}, **timed_out}
        for state in states:
            if state.rank in timed_out:
                request = timed_out[state.rank]
                lines = str(request.get("summary", "")).splitlines() or ["timed out"]
                state.timed_out = _short(lines[0])
                state.stack = [str(line) for line in request.get("stack", [])]
                state.waiting, state.stopped = True, False
        return HangReport(reason, states)

    def _dump_stacks(self, ranks: list[_Rank]) -> dict[int, str]:
        """Signal each rank to dump its stack; what each appended to its stack file."""
        signum = rankfiles.STACK_SIGNAL
        if signum is None or not ranks:
            return {}
        start: dict[int, int] = {}
        for record in ranks:
            path = rankfiles.stack_file(self.launch_dir, record.rank)
            try:
                start[record.rank] = os.path.getsize(path)
                os.kill(record.pid, signum)
            except OSError:
                continue
        sizes = dict(start)
        settled: set[int] = set()
        deadline = time.monotonic() + STACK_WAIT_S
        while len(settled) < len(start) and time.monotonic() < deadline:
            time.sleep(0.05)
            for rank in start:
                size = _size(rankfiles.stack_file(self.launch_dir, rank))
                if size > start[rank] and size == sizes[rank]:
                    settled.add(rank)
                sizes[rank] = size
        dumps = {}
        for rank, offset in start.items():
            try:
                with open(rankfiles.stack_file(self.launch_dir, rank), "rb") as handle:
                    handle.seek(offset)
                    dumps[rank] = handle.read().decode("utf-8", "replace")
            except OSError:
                continue
        return dumps

    # ------------------------------------------------------------------ stopping
    def _kill_stopped(self) -> None:
        """SIGKILL the ranks a SIGSTOP froze: they cannot act on a stop signal."""
        for record in self._live():
            if procstat.state(record.pid) == "T":
                _signal_group(record.pid, signal.SIGKILL)

    def _stop_job(self) -> None:
        self._stopped_at = time.monotonic()
        for record in self._live():
            stopped = procstat.state(record.pid) == "T"
            _signal_group(record.pid, signal.SIGKILL if stopped else signal.SIGTERM)

    def _finish_stopping(self) -> None:
        if self._stopped_at is None or time.monotonic() - self._stopped_at < KILL_AFTER_S:
            return
        for record in self._live():
            _signal_group(record.pid, signal.SIGKILL)


def _note_progress(record: _Rank, now: float) -> None:
    """Move the rank's last-progress time if it used the CPU or did I/O since then."""
    used = procstat.usage(record.pid)
    if used is None:
        return
    if record.ref_io < 0:  # first reading
        record.ref_time, record.ref_cpu, record.ref_io = now, used.cpu_s, used.io_bytes
        return
    busy = used.cpu_s - record.ref_cpu > BUSY_SHARE * (now - record.ref_time) + IDLE_NOISE_S
    if busy or used.io_bytes != record.ref_io:
        record.last_progress = record.ref_time = now
        record.ref_cpu, record.ref_io = used.cpu_s, used.io_bytes


def _signal_group(pid: int, signum: signal.Signals) -> None:
    """Signal a worker and its children (each starts in its own process group)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except OSError:
        pass


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _short(text: str, limit: int = 160) -> str:
    """One error line, without gloo's ``[/path/pair.cc:537] `` source location."""
    text = re.sub(r"^(\w+: )\[[^\]]*\] ", r"\1", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
