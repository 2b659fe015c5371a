"""Who started this process: rank and world size as a launcher handed them over.

``detect_process_env`` is pure: it reads only the mapping it is given. The order is
``overdrive launch`` / torchrun (``RANK``, ``WORLD_SIZE``...), then SLURM (``srun``), then
MPI (Open MPI, MPICH/Intel MPI, MVAPICH2), else a single plain process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from overdrive.config.settings import HANDOVER_VARIABLE
from overdrive.errors import ConfigError

Launcher = Literal["overdrive", "torchrun", "slurm", "mpi", "none"]

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class ProcessEnv:
    """This process's place in the world, as the launcher described it."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    launcher: Launcher = "none"

    @property
    def num_nodes(self) -> int:
        """Machines taking part (world size over processes per machine, rounded up)."""
        return max(1, -(-self.world_size // max(1, self.local_world_size)))

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ConfigError(
                f"the environment variable {name} is missing",
                key=name,
                fix=f"start the script with `overdrive launch` or set {name}",
            )
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"the environment variable {name}={raw!r} is not an integer",
            key=name,
            fix=f"unset {name} or set it to a whole number",
        ) from None


def _first_int(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if environ.get(name):
            return _int(environ, name)
    return None


def _port(environ: Mapping[str, str]) -> int | None:
    return _int(environ, "MASTER_PORT") if environ.get("MASTER_PORT") else None


def _check(env: ProcessEnv, source: str) -> ProcessEnv:
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:
        raise ConfigError(
            f"{source} says rank {env.rank} of world size {env.world_size}, which is impossible",
            key="RANK",
            fix="start the script with `overdrive launch` (or torchrun) instead of setting these "
            "variables by hand",
        )
    if not 0 <= env.local_rank < max(env.local_world_size, 1):
        raise ConfigError(
            f"{source} says local rank {env.local_rank} of {env.local_world_size} local processes",
            key="LOCAL_RANK",
            fix="start the script with `overdrive launch` (or torchrun)",
        )
    return env


def _torchrun(environ: Mapping[str, str]) -> ProcessEnv:
    world = _int(environ, "WORLD_SIZE")
    local_world = _int(environ, "LOCAL_WORLD_SIZE", world)
    node = _first_int(environ, ("GROUP_RANK", "NODE_RANK"))
    rank = _int(environ, "RANK")
    launcher: Launcher = "overdrive" if HANDOVER_VARIABLE in environ else "torchrun"
    return _check(
        ProcessEnv(
            rank=rank,
            local_rank=_int(environ, "LOCAL_RANK", 0),
            world_size=world,
            local_world_size=local_world,
            node_rank=node if node is not None else rank // max(local_world, 1),
            master_addr=environ.get("MASTER_ADDR") or None,
            master_port=_port(environ),
            launcher=launcher,
        ),
        "RANK/WORLD_SIZE",
    )


def _slurm_tasks_per_node(environ: Mapping[str, str], world: int) -> int:
    # SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE look like "4(x2),3"; the first count
    # is this layout's common case (homogeneous nodes).
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        match = re.match(r"\s*(\d+)", environ.get(name, ""))
        if match:
            return int(match.group(1))
    nodes = _first_int(environ, ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"))
    return max(1, world // nodes) if nodes else world


def _slurm(environ: Mapping[str, str]) -> ProcessEnv:
    world = _first_int(environ, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")) or 1
    return _check(
        ProcessEnv(
            rank=_int(environ, "SLURM_PROCID"),
            local_rank=_int(environ, "SLURM_LOCALID", 0),
            world_size=world,
            local_world_size=_slurm_tasks_per_node(environ, world),
            node_rank=_int(environ, "SLURM_NODEID", 0),
            master_addr=environ.get("SLURM_LAUNCH_NODE_IPADDR") or environ.get("MASTER_ADDR"),
            master_port=_port(environ),
            launcher="slurm",
        ),
        "SLURM_PROCID/SLURM_NTASKS",
    )


# (rank, size, local rank, local size) variable names per MPI flavour.
_MPI_FLAVOURS: tuple[tuple[str, str, str, str], ...] = (
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    (
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


def _mpi(environ: Mapping[str, str], names: tuple[str, str, str, str]) -> ProcessEnv:
    rank_v, size_v, local_rank_v, local_size_v = names
    world = _int(environ, size_v)
    local_world = _int(environ, local_size_v, world)
    return _check(
        ProcessEnv(
            rank=_int(environ, rank_v),
            local_rank=_int(environ, local_rank_v, 0),
            world_size=world,
            local_world_size=local_world,
            node_rank=_int(environ, rank_v) // max(local_world, 1),
            master_addr=environ.get("MASTER_ADDR") or None,
            master_port=_port(environ),
            launcher="mpi",
        ),
        f"{rank_v}/{size_v}",
    )


def detect_process_env(environ: Mapping[str, str]) -> ProcessEnv:
    """Read rank, world size and rendezvous address from ``environ`` (pure, no side effects)."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return _torchrun(environ)
    if "SLURM_PROCID" in environ and (
        environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS")
    ):
        return _slurm(environ)
    for names in _MPI_FLAVOURS:
        if names[0] in environ and names[1] in environ:
            return _mpi(environ, names)
    return ProcessEnv(
        master_addr=environ.get("MASTER_ADDR") or None,
        master_port=_port(environ),
    )
