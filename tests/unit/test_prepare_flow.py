"""``accelerator.prepare`` orders the objects itself and asks the strategy once; the strategy
never calls back into the Accelerator."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from overdrive.accelerator import Accelerator
from overdrive.errors import OverdriveError
from overdrive.training.prepare_order import placements_for, prepare_order
from tests.helpers.env import forget_launcher

STRATEGIES = Path(__file__).resolve().parents[2] / "src" / "overdrive" / "strategies"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    forget_launcher(monkeypatch, tmp_path)


def _objects() -> list[Any]:
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    loader = DataLoader(TensorDataset(torch.zeros(4, 3)), batch_size=2)
    return [sched, model, loader, opt]


def test_loaders_first_then_the_rest_in_order_with_schedulers_last() -> None:
    assert prepare_order(_objects()) == ([2], [1, 3, 0])


def test_one_placement_per_object() -> None:
    objects = _objects()
    assert placements_for(objects, None, True) == [True] * 4
    with pytest.raises(OverdriveError, match="pass one per object"):
        placements_for(objects, [True], True)


def test_no_strategy_frame_is_below_the_accelerator_preparing_an_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    acc = Accelerator(cpu=True)
    seen: list[str] = []
    original = Accelerator._preparer

    def recording(self: Accelerator, obj: Any) -> Any:
        callers = [Path(f.filename).resolve() for f in inspect.stack()[1:]]
        seen.extend(str(p) for p in callers if STRATEGIES in p.parents)
        return original(self, obj)

    monkeypatch.setattr(Accelerator, "_preparer", recording)
    sched, model, loader, opt = acc.prepare(*_objects())
    assert seen == []
    assert sched.scheduler.optimizer is opt.optimizer  # the scheduler found its optimizer
    assert len(list(loader)) == 2 and isinstance(model, nn.Module)
