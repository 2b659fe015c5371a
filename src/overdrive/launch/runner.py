"""Run a LaunchPlan: start, watch, restart and stop the workers.

One machine without restarts runs its workers itself (``direct``), without importing torch.
Otherwise rendezvous (static or c10d), the standard variables and worker supervision are
torch's elastic agent's; this module configures them and keeps the agent quiet. Either way it
relays the workers' output in whole lines, watches for hangs, and turns the outcome into an
exit code and a failure report that names the first rank to fail, lists every rank's exit
status and ends with the cause's traceback.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from overdrive.errors import LaunchError
from overdrive.launch import direct, watchdog
from overdrive.launch.failure import (
    Failure,
    RankExit,
    exit_code,
    exit_status_lines,
    failure_from_parts,
    format_report,
    root_cause,
)
from overdrive.launch.plan import LaunchPlan
from overdrive.launch.ports import free_port
from overdrive.launch.rankfiles import LAUNCH_DIR_VARIABLE
from overdrive.launch.relay import Relay, relay_logs_specs
from overdrive.launch.rendezvous import rdzv_backend_name, restart_environment

RUN_ID = direct.RUN_ID
SHUTDOWN_GRACE_S = direct.SHUTDOWN_GRACE_S
_RESTART_MARK = "will restart worker group"
# How often a port stolen between check and bind moves on (one machine only).
PORT_RETRIES = 3


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class _RestartNotes(logging.Handler):
    """Turns the agent's "will restart" log record into one line naming the failed rank."""

    def __init__(self, log_dir: str, say: Any = _say) -> None:
        super().__init__(level=logging.INFO)
        self.log_dir = log_dir
        self.restarts = 0
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a logging handler must never raise
            return
        if _RESTART_MARK not in message:
            return
        attempt = self.restarts
        self.restarts += 1
        cause = _attempt_cause(self.log_dir, attempt)
        why = f"rank {cause.rank} failed ({cause.summary})" if cause else "a worker failed"
        self.say(f"overdrive: {why}; restarting the group (restart {self.restarts}).")


def _attempt_cause(log_dir: str, attempt: int) -> Failure | None:
    """The root cause among the error files one attempt left behind."""
    pattern = os.path.join(log_dir, "*", f"attempt_{attempt}", "*", "error.json")
    found = [
        failure_from_parts(None, int(os.path.basename(os.path.dirname(path))), 0, 1, path)
        for path in glob.glob(pattern)
    ]
    found = [f for f in found if f.traceback is not None or f.exited]
    return root_cause(found) if found else None


@contextmanager
def _agent_logging(verbose: bool, notes: logging.Handler) -> Iterator[None]:
    """Route torch.distributed's log records to our handlers only (quiet unless verbose)."""
    root = logging.getLogger("torch.distributed")
    saved = (root.propagate, list(root.handlers), root.level)
    root.propagate = False
    root.handlers = [notes]
    if verbose:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(logging.Formatter("[elastic] %(levelname)s %(name)s: %(message)s"))
        root.handlers.append(stream)
    # Child loggers set their own level (WARNING); the restart note is logged at INFO.
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("torch.distributed.elastic") and (
            verbose or name.endswith("agent.server.api")
        ):
            logging.getLogger(name).setLevel(logging.INFO)
    try:
        yield
    finally:
        root.propagate, root.handlers, _ = saved


@contextmanager
def _worker_environment(plan: LaunchPlan, extra: dict[str, str]) -> Iterator[None]:
    """Put the plan's variables in this process's environment, which every worker inherits."""
    added = {
        **plan.shared_env(),
        **restart_environment(plan.rdzv_backend, plan.max_restarts),
        **extra,
    }
    saved = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _launch_config(plan: LaunchPlan, log_dir: str, relay: Relay) -> Any:
    from torch.distributed.launcher.api import LaunchConfig

    if plan.rdzv_backend == "static":
        rdzv_configs: dict[str, Any] = {"rank": plan.machine_rank}
    else:
        # Only the main machine hosts the c10d store; guessing from addresses fails on loopback.
        rdzv_configs = {"is_host": plan.is_main_machine}
    return LaunchConfig(
        min_nodes=plan.num_machines,
        max_nodes=plan.num_machines,
        nproc_per_node=plan.nproc_per_node,
        run_id=RUN_ID,
        role="worker",
        rdzv_endpoint=f"{plan.main_addr}:{plan.main_port}",
        rdzv_backend=rdzv_backend_name(plan.rdzv_backend, plan.max_restarts),
        rdzv_configs=rdzv_configs,
        max_restarts=plan.max_restarts,
        monitor_interval=plan.monitor_interval,
        logs_specs=relay_logs_specs(log_dir, relay),
        local_addr=plan.main_addr if plan.is_main_machine else None,
        shutdown_timeout=SHUTDOWN_GRACE_S,
    )


def _failures(error: Any, watch: watchdog.Watchdog | None) -> list[Failure]:
    return [
        failure_from_parts(
            rank,
            f.local_rank,
            f.pid,
            f.exitcode,
            f.error_file,
            exit_ns=watch.exit_ns(f.pid) if watch else None,
        )
        for rank, f in error.failures.items()
    ]


def _failure_text(
    plan: LaunchPlan, error: Any, watch: watchdog.Watchdog | None, restarts: int
) -> tuple[str, int]:
    """The closing report and the exit code: a hang's verdict when the watchdog saw one (1),
    else the first failure (its own exit code when it exited with one)."""
    failures = _failures(error, watch)
    exits = watch.exits() if watch else []
    seen = {e.local_rank for e in exits}
    base = plan.machine_rank * plan.nproc_per_node
    ended: dict[int, int] = getattr(error, "ended", {})
    exits += [RankExit(base + r, r, code) for r, code in ended.items() if r not in seen]
    hang = watch.hang if watch else None
    if hang is None:
        report = format_report(
            failures,
            nproc=plan.nproc_per_node,
            restarts=restarts,
            exits=exits,
            stopped=getattr(error, "stopped", None),
        )
        return report, exit_code(failures)
    lines = exit_status_lines(failures, exits, cause=None, hang_tag=hang.tag)
    return "\n".join([hang.headline(), *hang.verdict(), *lines]), 1


def _hang_label(plan: LaunchPlan) -> str:
    """``hang_timeout 3s, flag --hang_timeout``: the timeout in force and where it came from."""
    return f"hang_timeout {plan.hang_timeout}s, {plan.settings.source('hang_timeout')}"


def _causes(error: BaseException) -> list[BaseException]:
    """The error and the ones it was raised from (torch wraps the socket error)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _address_in_use(error: BaseException) -> bool:
    return any("EADDRINUSE" in str(e) or "address already in use" in str(e) for e in _causes(error))


def _reason(error: BaseException) -> str:
    """First lines of the error and its causes: ``store failed. (caused by: refused)``."""
    lines = [str(e).strip().splitlines()[0] for e in _causes(error) if str(e).strip()]
    if not lines:
        return type(error).__name__
    return lines[0] + "".join(f" (caused by: {line})" for line in lines[1:])


def run(plan: LaunchPlan, *, verbose: bool = False) -> int:
    """Start the plan's workers and wait for them; returns the launcher's exit code.

    On one machine, a port taken between the free-port check and the rendezvous store's bind
    (another program was quicker) moves to a fresh free port, a few times at most.
    """
    for attempt in range(PORT_RETRIES + 1):
        try:
            return _run_once(plan, verbose=verbose)
        except _PortTaken as taken:
            if attempt == PORT_RETRIES:
                break
            port = free_port()
            if verbose or taken.late:  # after workers ran, their output needs the reason
                _say(
                    f"overdrive: note: port {plan.main_port} was taken before the rendezvous "
                    f"could use it; using free port {port} instead"
                    + ("; the script starts again" if taken.late else "")
                )
            plan = dataclasses.replace(plan, main_port=port)
    raise LaunchError(
        f"the rendezvous port was taken by another program {PORT_RETRIES + 1} times in a row\n"
        "  fix: choose a port with --main_process_port that no other program uses"
    )


class _PortTaken(Exception):
    """The rendezvous store could not bind its port on the only machine (``late``: the
    workers had started)."""

    def __init__(self, late: bool = False) -> None:
        super().__init__(late)
        self.late = late


def _run_once(plan: LaunchPlan, *, verbose: bool) -> int:
    log_dir = tempfile.mkdtemp(prefix="overdrive-launch-")
    relay = Relay(prefix=plan.rank_prefix, log_dir=plan.log_dir)
    notes = _RestartNotes(log_dir, relay.say)
    endpoint = f"{plan.main_addr}:{plan.main_port} ({plan.rdzv_backend} rendezvous)"
    watch, extra_env = None, {}
    if watchdog.available():
        ranks_dir = os.path.join(log_dir, "ranks")
        os.mkdir(ranks_dir)
        extra_env[LAUNCH_DIR_VARIABLE] = ranks_dir
        watch = watchdog.Watchdog(
            ranks_dir,
            nproc=plan.nproc_per_node,
            hang_timeout=plan.hang_timeout,
            hang_label=_hang_label(plan),
            say=relay.say,
        )
    closing: str | None = None  # said once the workers' last lines are out
    relay.start()
    if watch:
        watch.start()
    try:
        if direct.applies(plan):
            direct.run_workers(plan, log_dir, relay, extra_env)
        else:
            _run_agent(plan, log_dir, relay, notes, extra_env, verbose=verbose)
        return 0
    except direct.GroupFailed as error:
        if watch:
            watch.stop()
        closing, code = _failure_text(plan, error, watch, notes.restarts)
        return code
    except direct.Stopped as error:
        closing = f"overdrive: stopped by {error.sigval.name}; all workers on this machine ended."
        return 128 + int(error.sigval)
    except direct.PortTaken as taken:
        raise _PortTaken(taken.late) from None
    except _RendezvousFailed as failed:
        raise LaunchError(
            f"rendezvous at {endpoint} failed: {_reason(failed.error)}\n"
            "  fix: start the launcher with machine_rank 0 first, check that "
            "main_process_ip/main_process_port reach it and that no other program uses the "
            "port, and that every machine uses the same num_machines"
        ) from None
    finally:
        if watch:
            watch.stop()
        relay.stop()
        if closing:
            _say(closing)
        shutil.rmtree(log_dir, ignore_errors=True)
        # A second signal during shutdown must not leave a traceback on the way out.
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _RendezvousFailed(Exception):
    """torch's rendezvous between the machines failed (``error`` says how)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _run_agent(
    plan: LaunchPlan,
    log_dir: str,
    relay: Relay,
    notes: _RestartNotes,
    extra_env: dict[str, str],
    *,
    verbose: bool,
) -> None:
    """Run the workers under torch's elastic agent, its outcomes raised as the direct run's."""
    from torch.distributed import DistNetworkError
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import launch_agent

    command = plan.worker_command()
    try:
        with _agent_logging(verbose, notes), _worker_environment(plan, extra_env):
            config = _launch_config(plan, log_dir, relay)
            launch_agent(config, command[0], command[1:])
    except ChildFailedError as error:
        raise direct.GroupFailed(dict(error.failures)) from None  # type: ignore[arg-type]
    except SignalException as error:
        raise direct.Stopped(int(error.sigval)) from None
    except (RendezvousError, DistNetworkError) as error:
        if plan.num_machines == 1 and plan.is_main_machine and _address_in_use(error):
            raise direct.PortTaken() from None
        raise _RendezvousFailed(error) from None
