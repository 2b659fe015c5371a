"""The pieces behind the launch fault guarantees, one process: line relay, blame, stacks."""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

from overdrive.launch.failure import Failure, RankExit, exit_status_lines, root_cause
from overdrive.launch.rankfiles import is_collective_timeout
from overdrive.launch.relay import Relay, split_lines
from overdrive.launch.stacks import HangReport, RankState, in_collective, main_stack

TERM, KILL = -int(signal.SIGTERM), -int(signal.SIGKILL)


def test_split_lines_keeps_partial_lines_and_crlf_whole() -> None:
    assert split_lines(b"a\nb\r\nc") == ([b"a\n", b"b\r\n"], b"c")
    assert split_lines(b"bar 10%\rbar 20%\r") == ([b"bar 10%\r"], b"bar 20%\r")  # \n may follow
    assert split_lines(b"x\r", final=True) == ([b"x\r"], b"")
    assert split_lines(b"tail", final=True) == ([b"tail\n"], b"")


def test_relay_writes_whole_prefixed_lines_from_interleaved_partial_writes(tmp_path: Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    relay = Relay(prefix=True, log_dir=str(tmp_path / "logs"), out=out, err=err)
    relay.add_pipe(str(tmp_path / "r0"), 0, to_err=False)
    relay.add_pipe(str(tmp_path / "r1"), 1, to_err=False)
    relay.start()
    w0 = os.open(tmp_path / "r0", os.O_WRONLY)
    w1 = os.open(tmp_path / "r1", os.O_WRONLY)
    for part0, part1 in [(b"hel", b"wor"), (b"lo\nag", b"ld\n"), (b"ain", b"")]:
        os.write(w0, part0)
        os.write(w1, part1)
    os.close(w0)
    os.close(w1)
    relay.stop()
    lines = out.getvalue().decode().splitlines()
    assert sorted(lines) == ["[rank 0] again", "[rank 0] hello", "[rank 1] world"]
    assert lines.index("[rank 0] hello") < lines.index("[rank 0] again")
    assert (tmp_path / "logs" / "rank_0.log").read_text() == "hello\nagain\n"
    assert err.getvalue() == b""


def _failure(
    rank: int, code: int, *, tb: str | None = None, t: int | None = None, end: int | None = None
) -> Failure:
    summary = tb.splitlines()[-1] if tb else None
    return Failure(rank, rank, 100 + rank, code, summary, tb, t, end)


def test_the_first_to_fail_in_time_is_the_cause_and_stopped_ranks_never_are() -> None:
    quiet_exit = _failure(1, 3, end=1_000)
    peer_lost = _failure(
        0, TERM, tb="Traceback\nRuntimeError: Connection reset by peer", t=1_200, end=1_500
    )
    assert root_cause([peer_lost, quiet_exit]) is quiet_exit
    stopped = _failure(2, TERM, end=1_400)
    assert root_cause([stopped, quiet_exit]) is quiet_exit
    # Killed from outside before anything else failed (OOM killer, kill -9): the cause.
    oom = _failure(3, KILL, end=900)
    assert root_cause([stopped, quiet_exit, oom]) is oom
    rows = exit_status_lines([stopped, quiet_exit, oom], [RankExit(4, 4, 0)], oom)
    assert rows[1:] == [
        "overdrive:   rank 1: exit code 3",
        "overdrive:   rank 2: killed by SIGTERM (stopped by the launcher)",
        "overdrive:   rank 3: killed by SIGKILL (first to fail)",
        "overdrive:   rank 4: exit code 0",
    ]


def test_collective_timeouts_are_told_from_a_users_own_timeout() -> None:
    gloo = RuntimeError("[../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms")
    assert is_collective_timeout(gloo)

    class CollectiveTimeoutError(Exception):
        pass

    assert is_collective_timeout(CollectiveTimeoutError("process(es) [1] did not call save"))
    assert not is_collective_timeout(TimeoutError("the download timed out"))
    assert not is_collective_timeout(RuntimeError("connection refused"))


DUMP = """Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait

Current thread 0x00007f0000000002 (most recent call first):
  File "/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/work/train.py", line 31 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "/src/overdrive/launch/bootstrap.py", line 92 in run
"""


def test_the_main_threads_stack_says_whether_a_rank_waits_in_a_collective() -> None:
    stack = main_stack(DUMP, 0x7F0000000002)
    assert stack == [
        '  File "/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
        '  File "/work/train.py", line 31 in <module>',
    ]
    assert in_collective(stack)
    other = main_stack(DUMP, 0x7F0000000001)
    assert other is not None and not in_collective(other)


def test_hang_verdict_names_absent_and_stopped_ranks() -> None:
    waiting = RankState(0, stack=['  File "c10d.py", line 1 in all_reduce'], waiting=True)
    absent = RankState(1, stack=['  File "/work/train.py", line 9 in <module>'])
    stopped = RankState(2, stopped=True, state="T")
    report = HangReport("no rank made progress for 3s", [waiting, absent, stopped])
    assert report.culprits == [1, 2]
    assert report.verdict() == [
        "overdrive: rank 1 never entered the collective that rank 0 waits in.",
        "overdrive: rank 2 is stopped (SIGSTOP) and cannot reach the collective that rank 0 "
        "waits in.",
    ]
    assert report.headline().startswith("overdrive: ranks 1, 2 hung; the launcher stopped")
    everyone = HangReport("x", [waiting, RankState(1, stack=[], waiting=True)])
    assert everyone.culprits == [] and "every rank waits" in everyone.verdict()[0]


def test_several_machines_watch_for_no_progress_only_when_asked(tmp_path: Path) -> None:
    """A launcher sees only its own ranks; they may all wait while another machine works."""
    from overdrive.config import load_settings
    from overdrive.launch import build_plan
    from overdrive.launch.describe import banner

    def plan(**flags: object):
        base = {"use_cpu": True, "num_processes": 4, "main_process_ip": "10.0.0.1", **flags}
        settings = load_settings(flags=base, environ={"XDG_CACHE_HOME": str(tmp_path)})
        return build_plan(settings, "t.py", environ={}, cpu_count=4)

    assert plan().hang_timeout == 300
    assert plan(num_machines=2).hang_timeout == 0
    assert "hang_timeout off (several machines" in banner(plan(num_machines=2))
    assert plan(num_machines=2, hang_timeout=900).hang_timeout == 900
