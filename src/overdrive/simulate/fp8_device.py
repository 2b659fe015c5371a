"""fp8 on a simulated CUDA GPU: with ``--simulate_device cuda`` the rank is taken to run on a
GPU that has float8 matrix products (compute capability 8.9 or newer, as an H100), so the
hardware check that refuses fp8 on this machine's CPU passes; torchao's ``Float8Linear``
then runs on fake tensors as on that GPU. With ``--simulate_device cpu`` fp8 is refused as
in a real CPU launch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from overdrive.precision import fp8
from overdrive.simulate.patching import patched


def _no_problem(device: object) -> None:
    return None


@contextlib.contextmanager
def fp8_on_simulated_gpu(device: str) -> Iterator[None]:
    """Inside: fp8's hardware check passes when the simulated ``device`` is cuda."""
    if device != "cuda":
        yield
        return
    with patched(fp8, "fp8_hardware_problem", _no_problem):
        yield
