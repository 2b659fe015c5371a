"""``--simulate_device``: the device whose allocator sizes a simulated rank's memory.

``cpu`` counts each tensor's own bytes (elements x dtype size). ``cuda`` counts each
allocation as PyTorch's CUDA caching allocator hands it out by default
(``c10/cuda/CUDACachingAllocator.cpp``: ``round_size``), while the simulation itself still runs
on this machine's CPU. Torch-free: the launchers check the name before anything runs.
"""

from __future__ import annotations

from overdrive.errors import LaunchError

DEVICES = ("cpu", "cuda")
DEFAULT_DEVICE = "cpu"

MIN_BLOCK = 512
"""Every CUDA block is a multiple of this many bytes (``kMinBlockSize``)."""
MODELS = {
    "cpu": "each tensor's own bytes (elements x dtype size)",
    "cuda": "PyTorch's CUDA caching allocator: each allocation rounded up to a multiple of "
    "512 bytes; its segments replayed for the reserved peak (FSDP2's streams kept apart)",
}
"""What each device's sizing counts, as the report states it."""


def check_device(name: str | None) -> str:
    """The device ``--simulate_device`` names (``cpu`` when not given); an unknown one is
    refused with the flag and the fix."""
    if name is None:
        return DEFAULT_DEVICE
    if name not in DEVICES:
        raise LaunchError(
            f"--simulate_device {name!r} is not a device the simulation sizes memory for\n"
            "  fix: --simulate_device cuda (PyTorch's CUDA caching allocator) or cpu (the "
            "dtypes' sizes, the default)"
        )
    return name


def cuda_block_bytes(nbytes: int) -> int:
    """The block CUDA's caching allocator hands out for a request of ``nbytes``: nothing for
    an empty tensor, else ``nbytes`` rounded up to a multiple of 512 (at least 512)."""
    if nbytes <= 0:
        return 0
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def allocation_bytes(device: str, nbytes: int) -> int:
    """The bytes an allocation of ``nbytes`` takes on ``device``."""
    return cuda_block_bytes(nbytes) if device == "cuda" else nbytes
