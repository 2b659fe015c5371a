"""The launch command line and the rendezvous port Hugging Face Accelerate's tests build on."""

from __future__ import annotations

import os
import re
from typing import Any

from overdrive.test_utils.devices import device_count

_BASE_PORT = 29500


def get_launch_command(**kwargs: Any) -> list[str]:
    """``["overdrive", "launch", "--key=value", ...]`` (Hugging Face Accelerate's command under
    its rename: this package installs no ``accelerate`` command); a True flag is ``--key``;
    False and None are left out (Hugging Face Accelerate writes ``--key=False``, which a
    store-true flag refuses)."""
    command = ["overdrive", "launch"]
    for key, value in kwargs.items():
        if isinstance(value, bool):
            if value:
                command.append(f"--{key}")
        elif value is not None:
            command.append(f"--{key}={value}")
    return command


DEFAULT_LAUNCH_COMMAND = get_launch_command(num_processes=device_count, monitor_interval=0.1)


def pytest_xdist_worker_id() -> int:
    """This pytest-xdist worker's number (``gw3`` -> 3), or 0 outside ``pytest -n N``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(re.sub(r"^gw", "", worker))


def get_torch_dist_unique_port() -> int:
    """A ``--main_process_port`` for a test's launch: 29500 plus the pytest-xdist worker's
    number, so concurrent workers do not race for one port."""
    return _BASE_PORT + pytest_xdist_worker_id()
