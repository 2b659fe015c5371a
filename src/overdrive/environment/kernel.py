"""The host check Hugging Face Accelerate runs at start (``check_os_kernel``; the face
``overdrive/utils/other.py`` re-exports it)."""

from __future__ import annotations

import logging
import os
import platform
import re

MIN_LINUX_KERNEL = (5, 5, 0)


def check_os_kernel() -> None:
    """Warn (from the main process) when a Linux kernel is older than 5.5.0, below which
    processes can hang."""
    info = platform.uname()
    if info.system != "Linux":
        return
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", info.release)
    if found is None:
        return
    version = tuple(int(part) for part in found.groups())
    if version >= MIN_LINUX_KERNEL or os.environ.get("RANK", "0") != "0":
        return
    shown, minimum = found.group(0), ".".join(map(str, MIN_LINUX_KERNEL))
    logging.getLogger(__name__).warning(
        f"Detected kernel version {shown}, which is below the recommended minimum of {minimum}; "
        "this can cause the process to hang. It is recommended to upgrade the kernel to the "
        "minimum version or higher."
    )
