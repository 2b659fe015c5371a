"""A simulated rank reads the real value of a tensor computed from constants alone, and a
made-up one of anything that depends on data, random numbers or an unknown write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from overdrive.simulate.fake_world import SimulatedRank, fake_world
from overdrive.simulate.known_values import libraries_read_known_values


def _simulated(body: Callable[[], Any]) -> Any:
    with fake_world(0, 2), SimulatedRank() as rank, libraries_read_known_values(rank.known):
        return body()


def test_a_value_made_from_constants_is_the_real_runs() -> None:
    def body() -> tuple[bool, int, bool]:
        positions = torch.arange(16).unsqueeze(0).expand(2, -1)
        steps = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1)
        packed = (steps != 1).cumsum(-1)  # how transformers looks for packed sequences
        return (
            bool((packed[:, -1] == 0).all()),
            int(positions[1, -1]),
            isinstance(packed, FakeTensor),
        )

    assert _simulated(body) == (True, 15, True)  # made up, they would read False and 0


def test_values_from_data_or_an_unknown_write_stay_made_up() -> None:
    def body() -> tuple[bool, float, float, float]:
        noise = torch.randn(4)
        zeros = torch.zeros(4)
        before = zeros.sum().item()
        zeros.add_(noise)  # written with an unknown value: forgotten
        view = torch.ones(4)[:2]
        view.mul_(noise[:2])  # a view written: its base is forgotten too
        return bool((noise > 100).all()), before, zeros.sum().item(), view.sum().item()

    assert _simulated(body) == (False, 0.0, 1.0, 1.0)  # 1.0: the made-up floating point value


def test_transformers_reads_known_values_as_a_real_runs_and_is_restored() -> None:
    pytest.importorskip("transformers")
    from transformers.masking_utils import find_packed_sequence_indices
    from transformers.utils import import_utils

    original = import_utils.is_fake_tensor

    def body() -> tuple[Any, Any]:
        torch.nn.Linear(2, 2)(torch.zeros(1, 2))  # any first forward: the library is in use
        default = torch.arange(16).unsqueeze(0)  # a model's default position ids
        packed = torch.cat([torch.arange(8), torch.arange(8)]).unsqueeze(0)
        return find_packed_sequence_indices(default), find_packed_sequence_indices(packed)

    unpacked, packed = _simulated(body)
    assert unpacked is None  # as in the real run: no mask needed
    assert packed is not None and tuple(packed.shape) == (1, 16)
    assert import_utils.is_fake_tensor is original
