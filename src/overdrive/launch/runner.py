"""Run a LaunchPlan with PyTorch's elastic agent: start, watch, restart and stop the workers.

Rendezvous (static or c10d), the standard variables and worker supervision are torch's; this
module configures them, keeps the agent quiet, and turns the outcome into an exit code and a
failure report that ends with the failing rank's traceback.
"""

from __future__ import annotations

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
from overdrive.launch.failure import Failure, failure_from_parts, format_report, root_cause
from overdrive.launch.plan import LaunchPlan
from overdrive.launch.rendezvous import rdzv_backend_name, restart_environment

RUN_ID = "overdrive"
# Grace period between SIGTERM and SIGKILL when the agent stops workers.
SHUTDOWN_GRACE_S = 5
_RESTART_MARK = "will restart worker group"


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class _RestartNotes(logging.Handler):
    """Turns the agent's "will restart" log record into one line naming the failed rank."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(level=logging.INFO)
        self.log_dir = log_dir
        self.restarts = 0

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
        _say(f"overdrive: {why}; restarting the group (restart {self.restarts}).")


def _attempt_cause(log_dir: str, attempt: int) -> Failure | None:
    """The root cause among the error files one attempt left behind."""
    pattern = os.path.join(log_dir, "*", f"attempt_{attempt}", "*", "error.json")
    found = [
        failure_from_parts(None, int(os.path.basename(os.path.dirname(path))), 0, 1, path)
        for path in glob.glob(pattern)
    ]
    found = [f for f in found if f.traceback is not None]
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
def _worker_environment(plan: LaunchPlan) -> Iterator[None]:
    """Put the plan's variables in this process's environment, which every worker inherits."""
    added = {**plan.shared_env(), **restart_environment(plan.rdzv_backend, plan.max_restarts)}
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


def _launch_config(plan: LaunchPlan, log_dir: str) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
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
        logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.NONE, tee=Std.NONE),
        local_addr=plan.main_addr if plan.is_main_machine else None,
        shutdown_timeout=SHUTDOWN_GRACE_S,
    )


def _failures(error: Any) -> list[Failure]:
    return [
        failure_from_parts(rank, f.local_rank, f.pid, f.exitcode, f.error_file)
        for rank, f in error.failures.items()
    ]


def run(plan: LaunchPlan, *, verbose: bool = False) -> int:
    """Start the plan's workers and wait for them; returns the launcher's exit code."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import launch_agent

    log_dir = tempfile.mkdtemp(prefix="overdrive-launch-")
    notes = _RestartNotes(log_dir)
    command = plan.worker_command()
    try:
        with _agent_logging(verbose, notes), _worker_environment(plan):
            config = _launch_config(plan, log_dir)
            launch_agent(config, command[0], command[1:])
        return 0
    except ChildFailedError as error:
        _say(format_report(_failures(error), nproc=plan.nproc_per_node, restarts=notes.restarts))
        return 1
    except SignalException as error:
        _say(f"overdrive: stopped by {error.sigval.name}; all workers on this machine ended.")
        return 128 + int(error.sigval)
    except RendezvousError as error:
        raise LaunchError(
            f"rendezvous at {plan.main_addr}:{plan.main_port} ({plan.rdzv_backend}) failed: "
            f"{error}\n  fix: start the launcher with machine_rank 0 first, check that "
            "main_process_ip/main_process_port reach it, and that every machine uses the same "
            "num_machines"
        ) from None
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
        # A second signal during shutdown must not leave a traceback on the way out.
        signal.signal(signal.SIGINT, signal.default_int_handler)
