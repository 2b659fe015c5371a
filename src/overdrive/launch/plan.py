"""LaunchPlan: what `overdrive launch` will start, decided once from the resolved settings.

Building a plan is pure (no processes, no sockets, no torch): the dry run prints it and the
runner executes it, so both always agree.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from overdrive.config import HANDOVER_VARIABLE, Settings
from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.errors import LaunchError
from overdrive.launch.described_env import described_variables
from overdrive.parallel.decide import Decision, decide_layout
from overdrive.parallel.layout import ParallelLayout

DEFAULT_PORT = 29500
BOOTSTRAP_MODULE = "overdrive.launch.bootstrap"
# Refused above this many CPU processes per core (without --oversubscribe), and never below
# this floor, so the suite's 2-4 process runs on a 2-core CI box keep working.
PROCESSES_PER_CORE = 4
PROCESS_FLOOR = 64


def process_limit(cores: int) -> int:
    """The most CPU processes one machine with ``cores`` cores starts without --oversubscribe."""
    return max(PROCESSES_PER_CORE * cores, PROCESS_FLOOR)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


INTEL_OPENMP_CPU = {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "1"}
"""Thread pinning for Intel's OpenMP runtime, set for ``--cpu`` runs (GNU OpenMP ignores it)."""


@dataclass(frozen=True)
class LaunchPlan:
    """Every decision of one launcher invocation (one machine's share of the job)."""

    settings: Settings
    target: str
    is_module: bool
    script_args: tuple[str, ...]
    num_machines: int
    machine_rank: int
    nproc_per_node: int
    device: str  # "cpu" or "cuda"
    backend: str  # "gloo" or "nccl"
    main_addr: str
    main_port: int
    rdzv_backend: str
    decision: Decision  # how the world runs (its layout, backend), decided here for the launcher
    cuda_visible_devices: str | None = None
    omp_num_threads: int | None = None
    max_restarts: int = 0
    monitor_interval: float = 0.1
    port_note: str | None = None
    load_note: str | None = None  # more CPU processes than cores: allowed, said once
    rank_prefix: bool = False  # relayed output lines start with "[rank N] "
    log_dir: str | None = None  # one log file per rank is written here too
    python: str = field(default_factory=lambda: sys.executable)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.num_machines

    @property
    def layout(self) -> ParallelLayout:
        """The parallel layout of the world (the decision's)."""
        return self.decision.layout

    @property
    def is_main_machine(self) -> bool:
        return self.machine_rank == 0

    @property
    def hang_timeout(self) -> int:
        """Seconds without progress on any rank before the launcher reports a hang (0: off).

        A launcher sees only its own machine's ranks, which may all wait while another
        machine works; so with several machines the check runs only when set explicitly.
        """
        if self.num_machines > 1 and self.settings.source("hang_timeout").kind == "default":
            return 0
        return int(self.settings["hang_timeout"])

    def worker_command(self) -> list[str]:
        """The command line every worker process runs (the same for all ranks)."""
        entry = ["-m", self.target] if self.is_module else [self.target]
        return [self.python, "-u", "-m", BOOTSTRAP_MODULE, *entry, *self.script_args]

    def shared_env(self) -> dict[str, str]:
        """Variables the launcher adds for every worker (the settings travel in one of them)."""
        env = {HANDOVER_VARIABLE: self.settings.to_json(), **described_variables(self.settings)}
        if self.cuda_visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.cuda_visible_devices
        if self.omp_num_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.omp_num_threads)
        if self.device == "cpu":
            # Whatever answers to `import accelerate`, the installed Hugging Face Accelerate
            # included, must see this world: its Accelerator (and Trainer) join a gloo group
            # on CPU processes only when this says they run there; else N worlds of one.
            env["ACCELERATE_USE_CPU"] = "true"
        if self.settings["use_cpu"]:
            env.update(INTEL_OPENMP_CPU)  # as Hugging Face Accelerate's launcher, on --cpu only
        if self.device == "cpu" and self.decision.backend is DistributedType.DEEPSPEED:
            env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator on CPU processes
        return env

    def rank_env(self, local_rank: int) -> dict[str, str]:
        """The standard variables every worker gets (as torch's elastic agent sets them)."""
        return {
            "RANK": str(self.machine_rank * self.nproc_per_node + local_rank),
            "LOCAL_RANK": str(local_rank),
            "GROUP_RANK": str(self.machine_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.nproc_per_node),
            "MASTER_ADDR": self.main_addr,
            "MASTER_PORT": str(self.main_port),
        }

    def shell_line(self, local_rank: int) -> str:
        """One worker as a shell line; the settings variable is referenced, not inlined."""
        env = {**self.rank_env(local_rank), **self.shared_env()}
        env[HANDOVER_VARIABLE] = f"${HANDOVER_VARIABLE}"
        assigns = [
            f"{k}={v}" if k == HANDOVER_VARIABLE else f"{k}={shlex.quote(v)}"
            for k, v in env.items()
        ]
        return " ".join(["env", *assigns, shlex.join(self.worker_command())])


def _gpu_list(gpu_ids: str, source: str, gpu_count: int, visible: str | None) -> list[str]:
    """Device names to expose, mapped through an already-set CUDA_VISIBLE_DEVICES."""
    parent = [d.strip() for d in visible.split(",") if d.strip()] if visible else None
    available = parent if parent is not None else [str(i) for i in range(gpu_count)]
    if gpu_ids == "all":
        return available[:gpu_count]
    chosen = []
    for index in (int(i) for i in gpu_ids.split(",")):
        if index >= gpu_count:
            raise LaunchError(
                f"gpu_ids = {gpu_ids!r} ({source}) asks for GPU {index}, but this machine "
                f"shows {gpu_count} GPU(s)\n"
                f"  fix: list indices from 0 to {gpu_count - 1} (they count within "
                "CUDA_VISIBLE_DEVICES when that is set)"
            )
        chosen.append(available[index])
    return chosen


def _count_processes(
    settings: Settings, device: str, gpus: int, cores: int, oversubscribe: bool
) -> int:
    machines = settings["num_machines"]
    total = settings["num_processes"]
    if total is None:
        return gpus if device == "cuda" else 1
    per_machine = total // machines
    limit = process_limit(cores)
    if device == "cpu" and per_machine > limit and not oversubscribe:
        each = f" ({per_machine} on each of {machines} machines)" if machines > 1 else ""
        raise LaunchError(
            f"num_processes = {total} ({settings.source('num_processes')}){each} is far more "
            f"than this machine's {cores} CPU core(s) can run; overdrive starts at most {limit} "
            "CPU processes per machine without --oversubscribe\n"
            f"  fix: start at most {cores} process(es) per machine (one per core runs fastest), "
            "or add --oversubscribe to start them all anyway"
        )
    if device == "cuda" and per_machine > gpus:
        raise LaunchError(
            f"num_processes = {total} ({settings.source('num_processes')}) needs {per_machine} "
            f"GPU(s) per machine, but {gpus} are usable here\n"
            "  fix: start fewer processes, make more GPUs visible, or add --cpu to rehearse "
            "on CPU processes"
        )
    return per_machine


def _pick_device(settings: Settings, gpus: int) -> str:
    if settings["use_cpu"]:
        return "cpu"
    if gpus > 0:
        return "cuda"
    if requested_backend(settings) is DistributedType.MULTI_GPU:
        raise LaunchError(
            f"distributed_type = MULTI_GPU ({settings.source('distributed_type')}) but this "
            "machine has no visible CUDA GPU\n"
            "  fix: add --cpu to run the same processes on the CPU with gloo, or run on a "
            "machine with GPUs"
        )
    return "cpu"


def build_plan(
    settings: Settings,
    target: str,
    script_args: Sequence[str] = (),
    *,
    is_module: bool = False,
    gpu_count: int = 0,
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    environ: Mapping[str, str] | None = None,
    cpu_count: int | None = None,
    oversubscribe: bool = False,
    rank_prefix: bool | None = None,
    log_dir: str | None = None,
) -> LaunchPlan:
    """Decide processes, device, rendezvous and environment for this machine, and the parallel
    layout of the whole world (a layout that cannot factor stops here)."""
    env = os.environ if environ is None else environ
    if not target:
        raise LaunchError(
            "no script to launch\n  fix: overdrive launch [options] train.py [args], or "
            "-m package.module [args]"
        )
    if max_restarts < 0:
        raise LaunchError(
            f"--max_restarts must be 0 or more, got {max_restarts}\n"
            "  fix: pass --max_restarts 0 (no restarts) or a positive count"
        )
    if monitor_interval <= 0:
        raise LaunchError(
            f"--monitor_interval must be positive, got {monitor_interval}\n"
            "  fix: pass seconds between checks of the workers, e.g. --monitor_interval 0.1"
        )
    visible = None
    gpus: list[str] = []
    if not settings["use_cpu"] and gpu_count > 0:
        gpus = _gpu_list(
            settings["gpu_ids"],
            str(settings.source("gpu_ids")),
            gpu_count,
            env.get("CUDA_VISIBLE_DEVICES"),
        )
        if settings["gpu_ids"] != "all":
            visible = ",".join(gpus)
    device = _pick_device(settings, len(gpus))
    cores = cpu_count if cpu_count is not None else usable_cores()
    nproc = _count_processes(settings, device, len(gpus), cores, oversubscribe)
    load_note = None
    if device == "cpu" and nproc > cores:
        load_note = (
            f"{nproc} processes on {cores} CPU cores: they share the cores (correct, but "
            "slower than one process per core)"
        )
    omp = None
    if "OMP_NUM_THREADS" not in env and nproc > 1:
        # One thread pool per process would oversubscribe the cores; split them instead.
        omp = max(1, cores // nproc) if device == "cpu" else 1
    machines = settings["num_machines"]
    decision = decide_layout(settings, nproc * machines, cuda=device == "cuda")
    return LaunchPlan(
        settings=settings,
        target=target,
        is_module=is_module,
        script_args=tuple(script_args),
        num_machines=machines,
        machine_rank=settings["machine_rank"],
        nproc_per_node=nproc,
        device=device,
        backend="nccl" if device == "cuda" else "gloo",
        main_addr=settings["main_process_ip"] or "127.0.0.1",
        main_port=settings["main_process_port"] or DEFAULT_PORT,
        rdzv_backend=settings["rdzv_backend"],
        decision=decision,
        cuda_visible_devices=visible,
        omp_num_threads=omp,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        load_note=load_note,
        rank_prefix=(nproc * machines > 1) if rank_prefix is None else rank_prefix,
        log_dir=log_dir,
    )
