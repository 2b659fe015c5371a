"""The worker bootstrap's error files and the launcher's failure report."""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from pathlib import Path

import pytest

from overdrive.launch import bootstrap
from overdrive.launch.failure import (
    Failure,
    RankExit,
    exit_code,
    failure_from_parts,
    format_report,
    root_cause,
    write_error_file,
)


@pytest.fixture
def error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    return path


def test_bootstrap_runs_script_as_main_with_args(tmp_path: Path, error_file: Path) -> None:
    out = tmp_path / "out.json"
    script = tmp_path / "ok.py"
    script.write_text(
        f"import json, sys\njson.dump([__name__, sys.argv, sys.path[0]], open({str(out)!r}, 'w'))\n"
    )
    assert bootstrap.run([str(script), "--a", "b c"]) == 0
    name, argv, path0 = json.loads(out.read_text())
    assert name == "__main__" and argv == [str(script), "--a", "b c"] and path0 == str(tmp_path)
    assert not error_file.exists()


def test_bootstrap_records_a_traceback_without_its_own_frames(
    tmp_path: Path, error_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "bad.py"
    script.write_text("def f():\n    raise ValueError('nope')\nf()\n")
    assert bootstrap.run([str(script)]) == 1
    printed = capsys.readouterr().err
    failure = failure_from_parts(None, 0, 1, 1, str(error_file))
    assert failure.rank == 3 and failure.summary == "ValueError: nope"
    assert failure.traceback == printed  # what the worker printed is what the report shows
    assert "runpy" not in printed and "launch/bootstrap.py" not in printed
    assert printed.splitlines()[1].startswith(f'  File "{script}", line 3')


def test_bootstrap_exit_codes(tmp_path: Path, error_file: Path) -> None:
    (tmp_path / "quit3.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "quit0.py").write_text("import sys\nsys.exit(0)\n")
    assert bootstrap.run([str(tmp_path / "quit0.py")]) == 0
    assert not error_file.exists()
    assert bootstrap.run([str(tmp_path / "quit3.py")]) == 3
    failure = failure_from_parts(None, 0, 1, 3, str(error_file))
    assert failure.summary == "SystemExit: 3" and failure.exited
    assert failure.traceback is None  # sys.exit is the script's own ending, not a crash


def test_bootstrap_prints_no_traceback_for_sys_exit_or_a_lost_peer(
    tmp_path: Path,
    error_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 41: argparse's error ends with its usage message, not a ``SystemExit: 2``
    traceback; a rank whose peer went away says so in the report's one line."""
    (tmp_path / "args.py").write_text(
        "import argparse\nargparse.ArgumentParser(prog='args.py').parse_args()\n"
    )
    monkeypatch.setattr(sys, "argv", ["args.py", "--bogus"])
    assert bootstrap.run([str(tmp_path / "args.py"), "--bogus"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err and "Traceback" not in err
    peer = tmp_path / "peer.py"
    peer.write_text("raise RuntimeError('[pair.cc:553] Connection closed by peer [::1]:4')\n")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert bootstrap.run([str(peer)]) == 1
    assert capsys.readouterr().err == ""
    failure = failure_from_parts(None, 0, 1, 1, str(error_file))
    assert not failure.printed and "Connection closed by peer" in (failure.traceback or "")
    monkeypatch.setenv("WORLD_SIZE", "1")  # alone, the error is its own: printed
    assert bootstrap.run([str(peer)]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_bootstrap_runs_a_module(tmp_path: Path, error_file: Path) -> None:
    package = tmp_path / "pkg_for_bootstrap"
    package.mkdir()
    (package / "__init__.py").write_text("")
    out = tmp_path / "mod.json"
    (package / "entry.py").write_text(
        f"import json, sys\njson.dump([__name__, sys.argv[1:]], open({str(out)!r}, 'w'))\n"
    )
    sys.path.insert(0, str(tmp_path))
    assert bootstrap.run(["-m", "pkg_for_bootstrap.entry", "x", "--y"]) == 0
    assert json.loads(out.read_text()) == ["__main__", ["x", "--y"]]


def test_error_file_is_readable_by_torch_elastic(error_file: Path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    write_error_file(
        "KeyError: 'x'",
        "Traceback ...\nKeyError: 'x'\n",
        {"TORCHELASTIC_ERROR_FILE": str(error_file)},
    )
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))
    assert failure.message["message"] == "KeyError: 'x'"
    assert failure.timestamp > 0


def _failure(rank: int, exitcode: int, tb: str | None = None, t: int | None = None) -> Failure:
    return Failure(rank, rank, 100 + rank, exitcode, tb and tb.splitlines()[-1], tb, t)


def test_root_cause_prefers_crashes_then_earliest_traceback() -> None:
    raised_early = _failure(1, 1, "Traceback\nRuntimeError: first", 10)
    raised_late = _failure(0, 1, "Traceback\nRuntimeError: peer closed", 20)
    stopped = _failure(2, -int(signal.SIGTERM))
    assert root_cause([raised_late, stopped, raised_early]) is raised_early
    segfault = _failure(3, -int(signal.SIGSEGV))
    assert root_cause([raised_early, segfault, stopped]) is segfault
    assert root_cause([stopped, _failure(4, 7)]).rank == 4


def test_report_tells_each_failure_once() -> None:
    """Issue 41: a traceback the worker printed is not printed again; every other rank is one
    line; a traceback the worker kept to itself ends the report."""
    cause = _failure(1, 1, "Traceback (most recent call last):\nRuntimeError: boom\n", 1)
    gloo = "RuntimeError: [/x/gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:2. " * 3
    other = dataclasses.replace(
        _failure(0, -int(signal.SIGTERM), f"Traceback\n{gloo}\n", 2), printed=False
    )
    lines = format_report([other, cause], nproc=2, restarts=1).splitlines()
    assert lines[0].startswith(
        "overdrive: rank 1 failed (exit code 1, pid 101): RuntimeError: boom; its traceback is "
        "above"
    )
    assert "restarted 1 time(s)" in lines[0]
    assert lines[1:] == [
        "overdrive: exit status of every rank on this machine:",
        "overdrive:   rank 0: killed by SIGTERM (stopped by the launcher after it raised "
        "RuntimeError: ... Connection closed by peer ...)",
        "overdrive:   rank 1: exit code 1 (first to fail)",
    ]
    kept = dataclasses.replace(cause, printed=False)
    tail = format_report([kept], nproc=1).splitlines()
    assert tail[-3:] == [
        "overdrive: traceback of rank 1:",
        "Traceback (most recent call last):",
        "RuntimeError: boom",
    ]
    assert "its traceback follows" in tail[0]
    crash = format_report([_failure(2, -int(signal.SIGKILL))], nproc=1)
    assert crash == (
        "overdrive: rank 2 failed (killed by SIGKILL, pid 102) and left no Python traceback; "
        "its own output above may say why."
    )


def test_a_script_that_exits_with_a_code_is_reported_in_one_line_with_that_code() -> None:
    cause = dataclasses.replace(_failure(0, 2), summary="SystemExit: 2", exited=True, time_ns=1)
    stopped = _failure(1, -int(signal.SIGTERM))
    text = format_report([cause, stopped], nproc=2)
    assert text.splitlines()[0] == (
        "overdrive: rank 0 ended with exit code 2 (pid 100); the other 1 process(es) on this "
        "machine were stopped."
    )
    assert "Traceback" not in text and "SystemExit" not in text
    assert exit_code([cause, stopped]) == 2
    assert exit_code([_failure(3, -int(signal.SIGKILL))]) == 1


def test_a_port_taken_is_recognised_through_torchs_wrapping() -> None:
    """c10d raises a connection error whose cause is the socket's EADDRINUSE."""
    from overdrive.launch.runner import _address_in_use, _reason

    try:
        try:
            raise OSError("The server socket has failed to listen: code: -98, name: EADDRINUSE")
        except OSError as inner:
            raise RuntimeError("The connection to the C10d store has failed.") from inner
    except RuntimeError as outer:
        wrapped = outer
    assert _address_in_use(wrapped)
    assert _reason(wrapped).endswith(
        "failed. (caused by: The server socket has failed to listen: code: -98, name: EADDRINUSE)"
    )
    assert not _address_in_use(RuntimeError("connection refused"))


def test_an_error_that_names_another_process_failure_is_a_consequence() -> None:
    """A rank whose collective save or load failed because process 0's did prints no
    traceback of its own; its one line names the error by its class name."""
    from overdrive.launch.failure import brief, lost_a_peer

    second = (
        "overdrive.checkpoint.errors.CheckpointError: save_state failed on the main process: "
        "overdrive.checkpoint.errors.CheckpointError: save_state: could not write /x"
    )
    assert lost_a_peer(second)
    assert lost_a_peer("CheckpointError: load_state failed on process 0: damaged file")
    assert not lost_a_peer("CheckpointError: save_state: could not write /x: [Errno 30]")
    assert brief("overdrive.checkpoint.errors.CheckpointError: no room").startswith(
        "CheckpointError: no room"
    )


def test_ranks_that_failed_on_their_own_are_not_called_stopped() -> None:
    first = dataclasses.replace(_failure(1, 7), summary="SystemExit: 7", exited=True, time_ns=1)
    second = dataclasses.replace(_failure(0, 7), summary="SystemExit: 7", exited=True, time_ns=2)
    head = format_report([first, second], nproc=2).splitlines()[0]
    assert head == "overdrive: rank 1 ended with exit code 7 (pid 101)."
    stopped = _failure(0, -int(signal.SIGTERM))
    head = format_report([first, stopped], nproc=3).splitlines()[0]
    assert head.endswith("; the other 2 process(es) on this machine were stopped.")
    ended_well = [RankExit(rank=2, local_rank=2, exitcode=0)]  # before rank 1 failed
    head = format_report([first, stopped], nproc=3, exits=ended_well).splitlines()[0]
    assert head.endswith("; the other 1 process(es) on this machine were stopped.")
