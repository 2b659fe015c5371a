"""fp8 on a simulated CUDA GPU: with ``--simulate_device cuda`` the rank is taken to run on a
GPU that has float8 matrix products (compute capability 8.9 or newer, as an H100), so the
hardware check that refuses fp8 on this machine's CPU passes; torchao's ``Float8Linear``
then runs on fake tensors as on that GPU. With ``--simulate_device cpu`` fp8 is refused as
in a real CPU launch."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

from overdrive.precision import fp8
from overdrive.simulate.fp8_scales import float8_scales_in_three_operators
from overdrive.simulate.patching import patched


@contextlib.contextmanager
def fp8_on_simulated_gpu(device: str) -> Iterator[None]:
    """Inside: fp8's hardware check passes when the simulated ``device`` is cuda; once fp8
    is used, torchao's scales are computed in three operators (``fp8_scales``)."""
    if device != "cuda":
        yield
        return
    with contextlib.ExitStack() as shortcuts:
        entered: list[bool] = []

        def no_problem(device: object) -> None:
            if not entered and importlib.util.find_spec("torchao") is not None:
                # the first check: torchao is about to be used (without it, the launch's
                # own check says so)
                shortcuts.enter_context(float8_scales_in_three_operators())
                entered.append(True)

        with patched(fp8, "fp8_hardware_problem", no_problem):
            yield
