"""overdrive's exact resume (the ``exact_resume`` setting): ``load_state`` continues the
prepared loader where the checkpoint stopped, so the resumed run sees exactly the batches of
the uninterrupted one. A script that also skips by hand, as Hugging Face Accelerate's
by_feature/checkpointing.py does (``skip_first_batches``, or ``continue`` while counting), is
stopped at once: its skip would drop those batches a second time. (Without the setting,
``load_state`` leaves the loader to the script, as Accelerate does: tests/differential.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import DataLoaderConfiguration, set_seed
from overdrive.accelerator import Accelerator
from overdrive.errors import ConfigError

EPOCHS, BATCHES = 3, 6  # 12 samples, batch 2


def _setup() -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    set_seed(42)
    acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(exact_resume=True))
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


def _resumed_by_hand(save_at: int, folder: Path, manual: str) -> list[list[int]]:
    acc, model, opt, loader = _setup()
    acc.load_state(str(folder))
    start_epoch, resume_step = divmod(save_at, BATCHES)
    seen = []
    for epoch in range(start_epoch, EPOCHS):
        active = loader
        if manual == "skip_first_batches" and epoch == start_epoch and resume_step:
            active = acc.skip_first_batches(loader, resume_step)
        for i, (x, ids) in enumerate(active):
            if manual == "continue" and epoch == start_epoch and i < resume_step:
                continue
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
def test_an_exact_resume_sees_the_uninterrupted_batches(tmp_path: Path, save_at: int) -> None:
    folder = tmp_path / "ckpt"
    full = _uninterrupted(save_at, folder)
    assert _resumed_automatically(save_at, folder) == full[save_at:]


@pytest.mark.parametrize("manual", ["skip_first_batches", "continue"])
def test_a_skip_by_hand_after_an_exact_resume_stops_the_run(tmp_path: Path, manual: str) -> None:
    folder = tmp_path / "ckpt"
    _uninterrupted(BATCHES + 2, folder)
    with pytest.raises(ConfigError, match="a second time") as caught:
        _resumed_by_hand(BATCHES + 2, folder, manual)
    assert caught.value.key == "exact_resume"


def test_a_skip_by_hand_at_an_epoch_boundary_is_no_second_skip(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    full = _uninterrupted(BATCHES, folder)
    assert _resumed_by_hand(BATCHES, folder, "skip_first_batches") == full[BATCHES:]
