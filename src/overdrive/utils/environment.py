"""``accelerate.utils.environment``: reading flags and ranks from environment variables,
temporary environments, and what the GPUs of this machine are (without initialising CUDA).

Torch-free to import (``import overdrive.utils`` loads this module).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from overdrive.cli.basic_config import write_basic_config as write_basic_config
from overdrive.environment.variables import patch_environment as patch_environment

logger = logging.getLogger(__name__)

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """1 for ``y/yes/t/true/on/1``, 0 for ``n/no/f/false/off/0`` (any case); True/False
    instead with ``to_bool``. Anything else raises ValueError."""
    text = value.lower()
    if text in _TRUE:
        return True if to_bool else 1
    if text in _FALSE:
        return False if to_bool else 0
    raise ValueError(f"invalid truth value {value}")


def get_int_from_env(env_keys: Iterable[str], default: int) -> int:
    """The first of ``env_keys`` set to a non-negative integer, else ``default``."""
    for key in env_keys:
        value = int(os.environ.get(key, -1))
        if value >= 0:
            return value
    return default


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Whether variable ``key`` holds a true value (``default`` when unset)."""
    return str_to_bool(os.environ.get(key, str(default))) == 1


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """Variable ``key`` as it is, or ``default`` when unset."""
    return os.environ.get(key, str(default))


def are_libraries_initialized(*library_names: str) -> list[str]:
    """Those of ``library_names`` already imported in this process."""
    return [name for name in library_names if name in sys.modules]


def get_current_device_type() -> tuple[str, str]:
    """``(device type, distributed type)`` of this machine's accelerator: always
    ``("cuda", "MULTI_GPU")``. Hugging Face Accelerate checks MLU, SDAA, MUSA, NPU, HPU, XPU
    and Neuron first; overdrive runs on none of them, and its ``is_<kind>_available`` answer
    False for each, so the answer is the same."""
    return "cuda", "MULTI_GPU"


def get_gpu_info() -> tuple[list[str], int]:
    """``(names, count)`` of the NVIDIA GPUs, from ``nvidia-smi`` (CUDA stays uninitialised)."""
    # deferred: keeps overdrive.utils light and torch-free (launch/ loads config/ and yaml)
    from overdrive.launch.host_gpus import gpu_names_and_count

    return gpu_names_and_count()


def get_driver_version() -> str:
    """The NVIDIA driver version of the first GPU, from ``nvidia-smi``."""
    # deferred: keeps overdrive.utils light and torch-free (launch/ loads config/ and yaml)
    from overdrive.launch.host_gpus import driver_version

    return driver_version()


def check_cuda_p2p_ib_support() -> bool:
    """False when several RTX 40xx GPUs run a driver older than 550.40.07 (their P2P and
    InfiniBand traffic hangs); True otherwise, or when ``nvidia-smi`` cannot tell."""
    # deferred: keeps overdrive.utils light and torch-free (launch/ loads config/ and yaml)
    from overdrive.launch.host_gpus import p2p_ib_supported

    return p2p_ib_supported()


@functools.cache
def check_cuda_fp8_capability() -> bool:
    """Whether the first GPU has compute capability 8.9 or newer (fp8 matmuls); asks
    ``nvidia-smi`` first and falls back to torch, which initialises CUDA."""
    # deferred: keeps overdrive.utils light and torch-free (launch/ loads config/ and yaml)
    from overdrive.launch.host_gpus import fp8_capable

    return fp8_capable()


@dataclass
class CPUInformation:
    """Where this process sits in a CPU job: global and local rank and world size."""

    rank: int = field(default=0, metadata={"help": "The rank of the current process."})
    world_size: int = field(default=1, metadata={"help": "The number of processes in the job."})
    local_rank: int = field(default=0, metadata={"help": "The rank of the process on its node."})
    local_world_size: int = field(
        default=1, metadata={"help": "The number of processes on this node."}
    )


def get_cpu_distributed_information() -> CPUInformation:
    """Rank and world sizes as torchrun, MPICH/Intel MPI, Open MPI or MVAPICH set them."""
    return CPUInformation(
        rank=get_int_from_env(
            ["RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"], 0
        ),
        world_size=get_int_from_env(
            ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"], 1
        ),
        local_rank=get_int_from_env(
            [
                "LOCAL_RANK",
                "MPI_LOCALRANKID",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "MV2_COMM_WORLD_LOCAL_RANK",
            ],
            0,
        ),
        local_world_size=get_int_from_env(
            [
                "LOCAL_WORLD_SIZE",
                "MPI_LOCALNRANKS",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "MV2_COMM_WORLD_LOCAL_SIZE",
            ],
            1,
        ),
    )


def override_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """Pin this process to the CPU cores nearest GPU ``local_process_index`` (needs
    nvidia-ml-py, or amdsmi on ROCm; nothing happens without CUDA). ``verbose`` defaults to
    ``ACCELERATE_DEBUG_MODE``."""
    # deferred: keeps overdrive.utils light and torch-free (launch/ loads config/ and yaml)
    from overdrive.launch.host_gpus import pin_to_gpu_numa_node

    if verbose is None:
        verbose = parse_flag_from_env("ACCELERATE_DEBUG_MODE", False)
    pin_to_gpu_numa_node(local_process_index, verbose)


@functools.cache
def set_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """``override_numa_affinity`` once per process and index (later calls do nothing)."""
    override_numa_affinity(local_process_index=local_process_index, verbose=verbose)


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty ``os.environ``; the previous variables (and only they)
    are back afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


_PURGED_PREFIXES = ("ACCELERATE_", "OVERDRIVE_")
_PURGE_MARK = "_accelerate_is_purged_environment_wrapped"


@contextlib.contextmanager
def _restore_prefixed_variables() -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith(_PURGED_PREFIXES)}
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith(_PURGED_PREFIXES)]:
            if key not in saved:
                del os.environ[key]
        os.environ.update(saved)


def _purging(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _restore_prefixed_variables():
            return func(*args, **kwargs)

    setattr(wrapper, _PURGE_MARK, True)
    return wrapper


def _purge_test_methods(cls: type) -> type:
    for name in dir(cls):
        method = getattr(cls, name)
        if name.startswith("test") and callable(method) and not hasattr(method, _PURGE_MARK):
            setattr(cls, name, _purging(method))
    return cls


def purge_accelerate_environment(func_or_cls: Any) -> Any:
    """Undo the ``ACCELERATE_*`` / ``OVERDRIVE_*`` variables a function (or each ``test*``
    method of a class and its subclasses) sets: after each call they are as they were before.
    """
    if not isinstance(func_or_cls, type):
        return _purging(func_or_cls)
    _purge_test_methods(func_or_cls)
    func_or_cls.__init_subclass__ = classmethod(  # type: ignore[assignment]
        lambda sub, **_: _purge_test_methods(sub)
    )
    return func_or_cls


_FORBIDDEN_ENV_CHARS = (";", "\n", "<", ">", " ")


def convert_dict_to_env_variables(current_env: dict[str, str]) -> list[str]:
    """``["KEY=value\\n", ...]`` for the items that are safe to write to an env file: both
    non-empty and free of ``; < >``, spaces and newlines (others are left out with a warning)."""
    lines = []
    for key, value in current_env.items():
        text = key + value
        if key and value and not any(char in text for char in _FORBIDDEN_ENV_CHARS):
            lines.append(f"{key}={value}\n")
        else:
            logger.warning(
                "Skipping %s=%s: it holds forbidden characters or misses a value", key, value
            )
    return lines
