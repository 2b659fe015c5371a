"""What the GPUs of this machine are, asked of ``nvidia-smi`` so CUDA stays uninitialised
(a launcher that forks must not touch CUDA first), and pinning a process to the CPU cores
nearest its GPU (NUMA affinity).

``overdrive.utils.environment`` exposes these under Hugging Face Accelerate's names.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import subprocess
from shutil import which

logger = logging.getLogger("overdrive.utils.environment")

# Consumer GPUs whose peer-to-peer / InfiniBand traffic hangs under drivers older than
# P2P_DRIVER_FLOOR (NCCL then needs NCCL_P2P_DISABLE=1 and NCCL_IB_DISABLE=1).
P2P_BROKEN_GPUS = ("RTX 40",)
P2P_DRIVER_FLOOR = "550.40.07"
FP8_CAPABILITY = (8, 9)


def nvidia_smi() -> str:
    """The ``nvidia-smi`` executable (on Windows, its default install path when not on PATH)."""
    if platform.system() != "Windows":
        return "nvidia-smi"
    found = which("nvidia-smi")
    if found is not None:
        return found
    drive = os.environ.get("SYSTEMDRIVE", "C:")
    return f"{drive}\\Program Files\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe"


def query(field: str) -> list[str]:
    """One ``nvidia-smi --query-gpu=<field>`` answer per GPU (raises when it cannot run)."""
    output = subprocess.check_output(
        [nvidia_smi(), f"--query-gpu={field}", "--format=csv,noheader"], text=True
    )
    return [line.strip() for line in output.strip().splitlines()]


def gpu_names_and_count() -> tuple[list[str], int]:
    """The GPUs' names and how many there are."""
    rows = query("count,name")
    return [row.split(",", 1)[1].strip() for row in rows], len(rows)


def driver_version() -> str:
    """The NVIDIA driver version (of the first GPU)."""
    return query("driver_version")[0]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def p2p_ib_supported() -> bool:
    """False only on several consumer GPUs known to hang on P2P/IB with an older driver; True
    otherwise, and whenever ``nvidia-smi`` cannot answer."""
    try:
        names, count = gpu_names_and_count()
        if count > 1 and any(bad in name for name in names for bad in P2P_BROKEN_GPUS):
            return _version_tuple(driver_version()) >= _version_tuple(P2P_DRIVER_FLOOR)
    except Exception:  # no nvidia-smi, or an answer it could not parse: assume it works
        pass
    return True


def fp8_capable() -> bool:
    """The first GPU's compute capability is 8.9 or newer (from ``nvidia-smi``, else from torch,
    which initialises CUDA)."""
    try:
        capability = tuple(int(part) for part in query("compute_capability")[0].split("."))
    except Exception:
        import torch

        capability = tuple(torch.cuda.get_device_capability())
    return capability >= FP8_CAPABILITY


def parse_cpu_list(text: str) -> list[int]:
    """A sysfs CPU list such as ``"0-3,8,10-11"`` as CPU numbers."""
    cpus: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        start, dash, end = part.partition("-")
        cpus.extend(range(int(start), int(end) + 1) if dash else [int(start)])
    return cpus


def _nvidia_affinity(local_process_index: int) -> list[int]:
    try:
        import pynvml as nvml
    except ImportError:
        raise ImportError(
            "Setting the CPU affinity of a process on an NVIDIA GPU needs the nvidia-ml-py "
            "package: pip install nvidia-ml-py"
        ) from None
    nvml.nvmlInit()
    words = math.ceil((os.cpu_count() or 1) / 64)
    handle = nvml.nvmlDeviceGetHandleByIndex(local_process_index)
    # NVML answers with 64-bit masks, lowest CPUs in the first word.
    bits = "".join(f"{word:064b}"[::-1] for word in nvml.nvmlDeviceGetCpuAffinity(handle, words))
    return [cpu for cpu, bit in enumerate(bits) if bit == "1"]


def _rocm_affinity(local_process_index: int) -> list[int]:
    try:
        import amdsmi
    except ImportError:
        raise ImportError(
            "Setting the CPU affinity of a process on a ROCm GPU needs the amdsmi package, "
            "which ships with ROCm; put ROCm's Python bindings on PYTHONPATH"
        ) from None
    amdsmi.amdsmi_init()
    try:
        handle = amdsmi.amdsmi_get_processor_handles()[local_process_index]
        node = amdsmi.amdsmi_topo_get_numa_node_number(handle)
        if node is None or node < 0:
            return sorted(os.sched_getaffinity(0))
        with open(f"/sys/devices/system/node/node{node}/cpulist", encoding="ascii") as f:
            return parse_cpu_list(f.read().strip())
    finally:
        amdsmi.amdsmi_shut_down()


def pin_to_gpu_numa_node(local_process_index: int, verbose: bool) -> None:
    """Restrict this process to the CPU cores attached to GPU ``local_process_index``
    (nothing happens without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return
    if torch.version.hip is not None:
        cpus = _rocm_affinity(local_process_index)
    else:
        cpus = _nvidia_affinity(local_process_index)
    os.sched_setaffinity(0, cpus)
    if verbose:
        cores = os.sched_getaffinity(0)
        logger.info(f"Assigning {len(cores)} cpu cores to process {local_process_index}: {cores}")
