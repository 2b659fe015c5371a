"""Worker entry point: ``python -m overdrive.launch.bootstrap [-m] target [args...]``.

Runs the user's script or module exactly as ``python script.py`` / ``python -m module`` would
(``__main__``, ``sys.argv``, ``sys.path[0]``), dies with the launcher, answers the launcher's
request for its stack, and on an uncaught exception records the traceback for the launcher's
failure report (after a collective timeout, once the launcher has read every rank's stack).
A traceback that only says a peer went away is recorded, not printed: the report says it in a
line (or prints it, if this rank failed first).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
from types import FrameType, TracebackType

from overdrive.alias import OPT_IN_ENV, install
from overdrive.alias.notice import LINE_VARIABLE, announce
from overdrive.launch.exit_barrier import rank_zero_leaves_last
from overdrive.launch.failure import lost_a_peer, write_error_file
from overdrive.launch.rankfiles import register_worker, report_collective_timeout
from overdrive.launch.worker_exit import finish

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process if the launcher dies, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the launcher died before the request took effect
        os._exit(1)


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Skip this module's and runpy's frames so the traceback starts in user code."""
    skip = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}

    def ours(name: str) -> bool:
        return name in skip or os.path.abspath(name) in skip

    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _traceback_text(exc: BaseException) -> str:
    tb = _user_frames(exc.__traceback__)
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _record(exc: BaseException) -> None:
    """Print the traceback as Python would (minus launcher frames) and keep a copy; after a
    SIGINT, only keep it. (Read here, not by the caller: entering this function runs a
    SIGINT handler still pending, so ``received`` is up to date.)"""
    text = _traceback_text(exc)
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    several = os.environ.get("WORLD_SIZE", "1") not in ("", "1")
    printed = not _Interrupt.received and not (several and lost_a_peer(summary))
    if printed:
        sys.stderr.write(text)
        sys.stderr.flush()
    write_error_file(summary, text, os.environ, printed=printed)
    report_collective_timeout(exc, summary, os.environ)


class _Interrupt:
    """SIGINT reaches a worker when the launcher stops the run (a user's Ctrl-C). The script
    still gets its ``KeyboardInterrupt`` (a ``finally`` or ``except`` runs); what follows from
    it (that traceback, a peer's "Connection closed by peer") is not printed: the launcher
    says "stopped by SIGINT" once."""

    received = False
    reporting = False


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    _Interrupt.received = True
    if not _Interrupt.reporting:  # never inside the report below: it would print a traceback
        raise KeyboardInterrupt


def _quiet_interrupts() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)


def _announce_engine() -> None:
    """Rank 0 says which engine `import accelerate` gets, once the script imports it."""

    line = os.environ.pop(LINE_VARIABLE, None)  # not for the script's own subprocesses
    if line and os.environ.get("RANK", "0") == "0":
        announce(line)


def _exit_code(exc: SystemExit) -> int:
    """Handle ``sys.exit(...)`` like Python: its message, its code, no traceback (the report
    learns when it happened, for blame)."""
    code = exc.code
    if code is None or code == 0:
        return 0
    if not isinstance(code, int):
        sys.stderr.write(f"{code}\n")  # what Python prints for sys.exit("message")
        code = 1
    write_error_file(f"SystemExit: {exc.code}", None, os.environ, exit_code=code)
    return code


def run(argv: list[str]) -> int:
    """Run ``argv`` (``[-m] target args...``) as the main program; return the exit code."""
    is_module = bool(argv) and argv[0] == "-m"
    if is_module:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("usage: python -m overdrive.launch.bootstrap [-m] target [args...]\n")
        return 2
    target, args = argv[0], argv[1:]

    # `import accelerate` gets overdrive unless a real one is installed and not opted out of
    install(
        asked_by=f"env {OPT_IN_ENV}=1, which overdrive launch sets for its workers when "
        "as_accelerate is on",
        started_by="overdrive launch",
    )
    _announce_engine()
    _quiet_interrupts()
    try:
        if is_module:
            sys.argv = [target, *args]  # run_module replaces argv[0] with the module's file
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *args]
            # `python dir` puts the directory itself first (it runs dir/__main__.py).
            path = os.path.abspath(target)
            sys.path[0] = path if os.path.isdir(path) else os.path.dirname(path)
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then exit 1
        _Interrupt.reporting = True  # first: a SIGINT arriving now must not raise in here
        _record(exc)
        return 128 + signal.SIGINT if _Interrupt.received else 1
    finally:
        _Interrupt.reporting = True  # a SIGINT during teardown ends nothing with a traceback
    return 0


def _release_process_group() -> None:
    """Destroy a process group the script left open, while the interpreter is still whole.

    A gloo group torn down by interpreter finalization sometimes aborts a process that has
    already finished its work (pytorch/pytorch#179291); the launcher would then report a
    failure for a run that succeeded.
    """
    if "torch.distributed" not in sys.modules:
        return  # no group without it; importing it here would only slow the exit
    try:
        # deferred: it imports torch.distributed, which the worker loads only if the script does
        from overdrive.launch.group_teardown import destroy_at_exit

        destroy_at_exit()
    except Exception:  # noqa: BLE001 - teardown is best effort; the exit code stands
        pass


def main() -> None:
    _die_with_parent()
    register_worker(os.environ)
    code = run(sys.argv[1:])
    rank_zero_leaves_last(code, os.environ)
    _release_process_group()
    finish(code)


if __name__ == "__main__":
    main()
