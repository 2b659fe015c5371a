"""What the launcher needs to know about the machine and any scheduler around it."""

from __future__ import annotations

import os
from collections.abc import Mapping

from overdrive.config import Settings


def gpu_count(settings: Settings) -> int:
    """CUDA devices this process can see; 0 without looking when the CPU was asked for."""
    if settings["use_cpu"]:
        return 0
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    import torch  # deferred: only a GPU launch needs it before the agent starts

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def scheduler_hint(settings: Settings, environ: Mapping[str, str]) -> str | None:
    """A note when a SLURM allocation spans more machines than the settings use."""
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    if not nodes or not nodes.isdigit() or int(nodes) <= settings["num_machines"]:
        return None
    return (
        f"this SLURM job has {nodes} nodes but num_machines = {settings['num_machines']} "
        f"({settings.source('num_machines')}); to use them all run one launcher per node, e.g. "
        f"srun --ntasks-per-node=1 bash -c 'overdrive launch --num_machines {nodes} "
        "--machine_rank $SLURM_NODEID --main_process_ip <first node> ...'"
    )
