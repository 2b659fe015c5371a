"""What the launcher needs to know about the machine and any scheduler around it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from overdrive.config import Settings

GPU_DRIVER_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
"""What a CUDA or ROCm driver puts on a Linux machine (WSL's ``/dev/dxg`` included): with none
of them, ``torch.cuda`` finds no device, so it need not be imported to say so."""


def gpu_driver_present() -> bool:
    """Whether any GPU driver's device or proc entry exists (no torch imported); off Linux,
    where drivers leave none of these, always True."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(path) for path in GPU_DRIVER_PATHS)


def gpu_count(settings: Settings) -> int:
    """CUDA devices this process can see; 0 without looking when the CPU was asked for, and
    without importing torch (about 2 s on a small machine) where no GPU driver is present."""
    if settings["use_cpu"]:
        return 0
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    if not gpu_driver_present():
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
