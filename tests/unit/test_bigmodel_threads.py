"""Two threads forwarding one offloaded model (weights on the disk, or on the CPU for
``cpu_offload``) get, every time, the outputs one thread gets: each hooked module's
load-forward-offload runs for one thread at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from overdrive.big_modeling import cpu_offload, disk_offload

ROUNDS = 200  # forwards per thread


def _model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(32, 32), nn.GELU()]
    return nn.Sequential(*layers).eval()


def _forward_from_two_threads(model: nn.Module) -> tuple[int, list[str]]:
    """Wrong outputs and errors over ``ROUNDS`` forwards in each of two threads."""
    inputs = [torch.randn(3, 32, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
    wrong = [0, 0]
    errors: list[str] = []
    start = threading.Barrier(2)

    def work(i: int) -> None:
        start.wait()
        try:
            with torch.no_grad():
                for _ in range(ROUNDS):
                    if not torch.equal(model(inputs[i]), expected[i]):
                        wrong[i] += 1
        except Exception as error:  # noqa: BLE001 - counted and shown by the test
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(wrong), errors


OFFLOADS: dict[str, Callable[[nn.Module, Path], None]] = {
    "disk": lambda m, folder: disk_offload(m, folder, execution_device=torch.device("cpu")),
    "cpu": lambda m, folder: cpu_offload(m, execution_device=torch.device("cpu")),
}


@pytest.mark.parametrize("where", sorted(OFFLOADS))
def test_two_threads_forwarding_one_offloaded_model_get_one_threads_outputs(
    tmp_path: Path, where: str
) -> None:
    model = _model()
    OFFLOADS[where](model, tmp_path / "offload")
    wrong, errors = _forward_from_two_threads(model)
    assert errors == [] and wrong == 0, (wrong, errors[:3])
