"""A resume by hand, as Hugging Face Accelerate's by_feature/checkpointing.py does it:
``load_state``, ``skip_first_batches`` for the rest of the interrupted epoch, then plain
epochs. It must see exactly the batches of the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import set_seed
from overdrive.accelerator import Accelerator

EPOCHS, BATCHES = 3, 6  # 12 samples, batch 2


def _setup() -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    set_seed(42)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(2 * BATCHES, 3), torch.arange(2 * BATCHES))
    return acc, *acc.prepare(model, opt, DataLoader(data, batch_size=2, shuffle=True))


def _step(
    acc: Accelerator, model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor
) -> None:
    acc.backward(model(x).sum())
    opt.step()
    opt.zero_grad()


def _uninterrupted(save_at: int, folder: Path) -> list[list[int]]:
    acc, model, opt, loader = _setup()
    seen, step = [], 0
    for _ in range(EPOCHS):
        for x, ids in loader:
            _step(acc, model, opt, x)
            seen.append(ids.tolist())
            step += 1
            if step == save_at:
                acc.save_state(str(folder))
    return seen


def _resumed_by_hand(save_at: int, folder: Path) -> list[list[int]]:
    acc, model, opt, loader = _setup()
    acc.load_state(str(folder))
    start_epoch, resume_step = divmod(save_at, BATCHES)
    seen = []
    for epoch in range(start_epoch, EPOCHS):
        active = loader
        if epoch == start_epoch and resume_step:
            active = acc.skip_first_batches(loader, resume_step)
        for x, ids in active:
            _step(acc, model, opt, x)
            seen.append(ids.tolist())
    return seen


def _resumed_automatically(save_at: int, folder: Path) -> list[list[int]]:
    acc, model, opt, loader = _setup()
    acc.load_state(str(folder))
    seen = []
    for _ in range(save_at // BATCHES, EPOCHS):
        for x, ids in loader:
            _step(acc, model, opt, x)
            seen.append(ids.tolist())
    return seen


@pytest.mark.parametrize("save_at", [BATCHES + 2, BATCHES, 2])
@pytest.mark.parametrize("resume", [_resumed_by_hand, _resumed_automatically])
def test_resume_sees_the_uninterrupted_batches(tmp_path: Path, save_at: int, resume) -> None:
    folder = tmp_path / "ckpt"
    full = _uninterrupted(save_at, folder)
    assert resume(save_at, folder) == full[save_at:]
