"""Run one machine's workers without torch's elastic agent, so the launcher never imports torch.

The agent is needed for a rendezvous between machines and for restarts; a job on one machine
with ``max_restarts`` 0 needs neither, and importing torch for the agent cost the launcher
well over a second on every launch. Here the workers get the variables the agent gives them
(rank 0 hosts the store, as under a plain ``env://`` start), an error file each in the
agent's layout, and the agent's stop sequence when one fails: the signal to every other
worker's process group, SIGKILL after the grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import FrameType

from overdrive.launch import relay as relay_module
from overdrive.launch.failure import ERROR_FILE_VARIABLE, read_error_data
from overdrive.launch.plan import LaunchPlan
from overdrive.launch.ports import port_is_free
from overdrive.launch.relay import Relay

RUN_ID = "overdrive"
# Grace between the stop signal and SIGKILL: after the launcher got a signal, and after a
# worker failed (torch's agent waits as long in each case).
SHUTDOWN_GRACE_S = 5
FAILURE_GRACE_S = 30
# Features of torch's agent that need it running: a user who sets one gets the agent.
AGENT_ONLY_VARIABLES = (
    "TORCHELASTIC_ENABLE_FILE_TIMER",
    "TORCHELASTIC_HEALTH_CHECK_PORT",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
)
# The signals that stop the launcher; each is passed on to the workers, as the agent does.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_ADDRESS_IN_USE = ("eaddrinuse", "address already in use")


def applies(plan: LaunchPlan, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this plan runs without the agent: one machine, no restarts, pipes to relay,
    and none of the agent's own features asked for."""
    return (
        plan.num_machines == 1
        and plan.max_restarts == 0
        and relay_module.supported()
        and not any(environ.get(name) for name in AGENT_ONLY_VARIABLES)
    )


@dataclass(frozen=True)
class WorkerEnd:
    """How one worker that failed ended, with the fields the failure report reads."""

    local_rank: int
    pid: int
    exitcode: int
    error_file: str


class GroupFailed(Exception):
    """Some worker ended with a non-zero code; every failed worker, by global rank. When the
    launcher started the workers itself it also knows the local ranks it then stopped and how
    every worker ended (exit code by local rank)."""

    def __init__(
        self,
        failures: dict[int, WorkerEnd],
        stopped: frozenset[int] | None = None,
        ended: dict[int, int] | None = None,
    ) -> None:
        super().__init__(sorted(failures))
        self.failures = failures
        self.stopped = stopped
        self.ended = ended or {}


class PortTaken(Exception):
    """The main process port was taken before the workers could bind it (``late``: after
    they started, so their output so far was already relayed)."""

    def __init__(self, late: bool = False) -> None:
        super().__init__(late)
        self.late = late


class Stopped(Exception):
    """The launcher received a stop signal; the workers were given it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.sigval = signal.Signals(signum)


def worker_env(plan: LaunchPlan, local_rank: int, error_file: str) -> dict[str, str]:
    """The variables one worker adds to the launcher's: the plan's and those the agent sets."""
    rank = plan.rank_env(local_rank)
    return {
        **plan.shared_env(),
        **rank,
        "ROLE_RANK": rank["RANK"],
        "ROLE_NAME": "worker",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": rank["WORLD_SIZE"],
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": RUN_ID,
        "TORCHELASTIC_USE_AGENT_STORE": "False",  # rank 0 hosts the store itself
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        ERROR_FILE_VARIABLE: error_file,
    }


@contextmanager
def _signals_raise() -> Iterator[None]:
    """A stop signal to the launcher raises ``Stopped`` in the loop that waits."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; signals then act as they did
        return
    # A signal ignored before (``nohup`` ignores SIGHUP) stays ignored.
    wanted = [s for s in _STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
    saved = {s: signal.signal(s, handler) for s in wanted}
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


class _Workers:
    """The started worker processes of one launch, by local rank."""

    def __init__(self, plan: LaunchPlan, log_dir: str, extra_env: Mapping[str, str]) -> None:
        self.plan = plan
        self.log_dir = log_dir
        self.extra_env = dict(extra_env)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.error_files: dict[int, str] = {}
        self.signalled: set[int] = set()  # local ranks alive when the stop signal went out

    def start(self, relay: Relay) -> None:
        command = self.plan.worker_command()
        for local_rank in range(self.plan.nproc_per_node):
            folder = os.path.join(self.log_dir, RUN_ID, "attempt_0", str(local_rank))
            os.makedirs(folder)
            rank = self.plan.machine_rank * self.plan.nproc_per_node + local_rank
            out, err = os.path.join(folder, "stdout.log"), os.path.join(folder, "stderr.log")
            relay.add_pipe(out, rank, to_err=False)
            relay.add_pipe(err, rank, to_err=True)
            self.error_files[local_rank] = os.path.join(folder, "error.json")
            env = {**os.environ, **self.extra_env}
            env.update(worker_env(self.plan, local_rank, self.error_files[local_rank]))
            with open(out, "wb") as stdout, open(err, "wb") as stderr:
                self.procs[local_rank] = subprocess.Popen(
                    command, env=env, stdout=stdout, stderr=stderr, start_new_session=True
                )

    def wait(self) -> None:
        """Until every worker ended well (returns) or one failed (the others are stopped)."""
        while True:
            codes = [proc.poll() for proc in self.procs.values()]
            if any(code not in (None, 0) for code in codes):
                self.stop(signal.SIGTERM, grace=FAILURE_GRACE_S)
                ended = {r: int(p.returncode) for r, p in self.procs.items()}
                raise GroupFailed(self.failures(), frozenset(self.signalled), ended)
            if all(code == 0 for code in codes):
                return
            time.sleep(self.plan.monitor_interval)

    def stop(self, sig: signal.Signals, grace: float | None = None) -> None:
        """``sig`` to every live worker's process group; SIGKILL to those alive after the
        grace (``SHUTDOWN_GRACE_S`` unless given), or at once when another signal comes."""
        grace = SHUTDOWN_GRACE_S if grace is None else grace
        try:
            self.signalled |= {r for r, p in self.procs.items() if p.poll() is None}
            self._signal_all(sig)
            deadline = time.monotonic() + grace
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            self._signal_all(signal.SIGKILL)
            for proc in self.procs.values():
                with suppress(subprocess.TimeoutExpired):  # stuck in the kernel: let it be
                    proc.wait(SHUTDOWN_GRACE_S)

    def _alive(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())

    def _signal_all(self, sig: signal.Signals) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with suppress(OSError):
                    os.killpg(proc.pid, sig)

    def failures(self) -> dict[int, WorkerEnd]:
        base = self.plan.machine_rank * self.plan.nproc_per_node
        return {
            base + local: WorkerEnd(local, proc.pid, int(proc.returncode), self.error_files[local])
            for local, proc in self.procs.items()
            if proc.returncode not in (None, 0)
        }


def run_workers(plan: LaunchPlan, log_dir: str, relay: Relay, extra_env: Mapping[str, str]) -> None:
    """Start the plan's workers and wait: returns when all succeeded, else raises
    ``GroupFailed``, ``PortTaken`` (rank 0 could not bind the port) or ``Stopped``."""
    if not port_is_free(plan.main_port, ipv6=":" in plan.main_addr):
        raise PortTaken()
    workers = _Workers(plan, log_dir, extra_env)
    with _signals_raise():
        try:
            workers.start(relay)
            workers.wait()
        except Stopped as stop:
            workers.stop(stop.sigval)
            raise
        except GroupFailed as failed:
            if _rank_zero_found_the_port_taken(failed, plan):
                raise PortTaken(late=True) from None
            raise
        except BaseException:  # a worker that could not start: none may outlive the launcher
            workers.stop(signal.SIGTERM)
            raise


def _rank_zero_found_the_port_taken(failed: GroupFailed, plan: LaunchPlan) -> bool:
    """Rank 0's store could not bind the main process port (torch's message names the port;
    any other port the script itself binds is the script's own error)."""
    end = failed.failures.get(0) if plan.machine_rank == 0 else None
    if end is None:
        return False
    summary = str(read_error_data(end.error_file).get("summary", "")).lower()
    in_use = any(mark in summary for mark in _ADDRESS_IN_USE)
    return in_use and f"port: {plan.main_port}," in summary
