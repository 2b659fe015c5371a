"""AcceleratedScheduler: one advance per optimizer step that really ran."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from overdrive.optimizer import AcceleratedOptimizer
from overdrive.precision import Precision
from overdrive.scheduler import AcceleratedScheduler
from overdrive.training.accumulation import GradientState
from tests.unit.test_optimizer import SkippingPrecision


def _setup(
    precision: Precision | None = None, steps: int = 1, with_optimizer: bool = True
) -> tuple[nn.Linear, AcceleratedOptimizer, AcceleratedScheduler, GradientState]:
    model = nn.Linear(2, 1)
    raw = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(raw, lambda step: 1.0 / (step + 1))
    gs = GradientState(steps)
    opt = AcceleratedOptimizer.wrapping(raw, gs, precision or Precision())
    return model, opt, AcceleratedScheduler(sched, [opt], step_with_optimizer=with_optimizer), gs


def _micro_batch(
    model: nn.Linear, opt: AcceleratedOptimizer, sched: AcceleratedScheduler, gs: GradientState
) -> None:
    gs.advance(end_of_dataloader=False)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched.step()
    opt.zero_grad()


def test_advances_once_per_window_with_accumulation() -> None:
    model, opt, sched, gs = _setup(steps=4)
    for _ in range(10):
        _micro_batch(model, opt, sched, gs)
    assert opt.steps_taken == 2
    assert sched.scheduler.last_epoch == 2
    assert sched.get_last_lr() == [1.0 / 3]


def test_skipped_steps_do_not_advance_the_schedule() -> None:
    model, opt, sched, gs = _setup(SkippingPrecision(skip={1, 3}))
    for _ in range(5):
        _micro_batch(model, opt, sched, gs)
    assert opt.steps_taken == 3
    assert sched.scheduler.last_epoch == opt.steps_taken


def test_repeated_scheduler_calls_advance_once_per_step() -> None:
    model, opt, sched, gs = _setup()
    _micro_batch(model, opt, sched, gs)
    sched.step()
    sched.step()
    assert sched.scheduler.last_epoch == 1


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")
def test_without_step_with_optimizer_every_call_advances() -> None:
    model, opt, sched, gs = _setup(steps=4, with_optimizer=False)
    for _ in range(3):
        _micro_batch(model, opt, sched, gs)
    assert opt.steps_taken == 0
    assert sched.scheduler.last_epoch == 3


def test_state_dict_passes_through() -> None:
    model, opt, sched, gs = _setup()
    _micro_batch(model, opt, sched, gs)
    state = sched.state_dict()
    assert state["last_epoch"] == 1
    _, _, other, _ = _setup()
    other.load_state_dict(state)
    assert other.scheduler.last_epoch == 1
    assert other.base_lrs == [1.0]  # attribute access falls through to the scheduler


def test_advances_once_per_process_when_asked_and_stops_at_a_one_cycle_end() -> None:
    model = nn.Linear(2, 1)
    raw = torch.optim.SGD(model.parameters(), lr=1.0)
    gs = GradientState(1)
    opt = AcceleratedOptimizer.wrapping(raw, gs, Precision())
    cycle = torch.optim.lr_scheduler.OneCycleLR(raw, max_lr=1.0, total_steps=5)
    sched = AcceleratedScheduler(cycle, [opt], steps_per_advance=2)
    for _ in range(4):  # 8 scheduler steps asked for, OneCycleLR allows 5 in all
        _micro_batch(model, opt, sched, gs)
    assert opt.steps_taken == 4 and cycle._step_count == 6  # 1 (init) + 5, then it stops


def test_accelerator_schedule_count_is_one_per_step_on_one_process() -> None:
    from overdrive import Accelerator, SchedulerKwargs

    acc = Accelerator(cpu=True)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    _, _, prepared = acc.prepare(model, opt, sched)
    assert prepared.steps_per_advance == 1  # one process: one step either way
    acc2 = Accelerator(cpu=True, kwargs_handlers=[SchedulerKwargs(once_per_optimizer_step=True)])
    assert acc2._scheduler_steps_per_advance() == 1


def test_before_any_optimizer_step_the_schedule_advances_by_itself() -> None:
    """As Hugging Face Accelerate's: a scheduler stepped before the optimizer ever was advances,
    unless the optimizer reports a skipped step; once optimizer steps are tried, the schedule
    follows them (a second scheduler.step() for one optimizer step does nothing)."""
    from overdrive import Accelerator

    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda n: 1 - n / 10)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.9)
    optimizer._is_overflow = True  # Hugging Face Accelerate's tests mark a skipped step so
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.9)
    optimizer._is_overflow = False
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    scheduler.step()
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.8)
