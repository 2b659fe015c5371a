"""The launch command line and memory probe the described system's tests build on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def get_launch_command(**kwargs: Any) -> list[str]:
    """``["overdrive", "launch", "--key=value", ...]`` (the described system's command under
    its rename: this package installs no ``accelerate`` command); a True flag is ``--key``;
    None is left out."""
    command = ["overdrive", "launch"]
    for key, value in kwargs.items():
        if isinstance(value, bool):
            if value:
                command.append(f"--{key}")
        elif value is not None:
            command.append(f"--{key}={value}")
    return command


_DEVICES = torch.cuda.device_count() if torch.cuda.is_available() else 1
DEFAULT_LAUNCH_COMMAND = get_launch_command(num_processes=_DEVICES, monitor_interval=0.1)


def _memory_probe() -> Callable[[], int]:
    if torch.cuda.is_available():
        return torch.cuda.memory_allocated
    return lambda: 0


memory_allocated_func: Callable[[], int] = _memory_probe()
