"""AcceleratedOptimizer: steps only when a window closes, reports skipped steps."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from overdrive.optimizer import AcceleratedOptimizer
from overdrive.precision import Precision
from overdrive.training.accumulation import GradientState


class SkippingPrecision(Precision):
    """Pretends loss scaling found inf/NaN on the steps listed."""

    def __init__(self, skip: set[int]) -> None:
        self.skip = skip
        self.calls = 0
        self.unscaled = 0

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.unscaled += 1

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> bool:
        self.calls += 1
        if self.calls in self.skip:
            return False
        optimizer.step(**kwargs)
        return True


def _opt(
    precision: Precision | None = None, steps: int = 1
) -> tuple[nn.Linear, AcceleratedOptimizer, GradientState]:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    gs = GradientState(steps)
    raw = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, AcceleratedOptimizer.wrapping(raw, gs, precision or Precision()), gs


def test_is_an_optimizer_that_shares_the_wrapped_data() -> None:
    model, opt, _ = _opt()
    assert isinstance(opt, torch.optim.Optimizer)
    assert opt.param_groups is opt.optimizer.param_groups
    assert opt.state is opt.optimizer.state
    assert opt.defaults["lr"] == 0.5
    opt.param_groups[0]["lr"] = 0.1
    assert opt.optimizer.param_groups[0]["lr"] == 0.1
    # a torch scheduler accepts it
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    assert sched.optimizer is opt


def test_state_dict_round_trip() -> None:
    model, opt, _ = _opt()
    opt.optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    state = opt.state_dict()
    _, other, _ = _opt()
    other.optimizer = torch.optim.Adam(other.optimizer.param_groups[0]["params"], lr=1.0)
    other.load_state_dict(state)
    assert other.param_groups[0]["lr"] == 1e-2
    assert torch.equal(other.state_dict()["state"][0]["exp_avg"], state["state"][0]["exp_avg"])


def test_step_and_zero_grad_wait_for_the_window_to_close() -> None:
    model, opt, gs = _opt(steps=2)
    before = model.weight.detach().clone()
    gs.advance(end_of_dataloader=False)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    opt.zero_grad()
    assert torch.equal(model.weight, before)
    assert model.weight.grad is not None  # kept for the next micro-batch
    assert opt.steps_taken == 0
    gs.advance(end_of_dataloader=False)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert not torch.equal(model.weight, before)
    assert opt.steps_taken == 1
    opt.zero_grad()
    assert model.weight.grad is None


def test_skipped_step_is_reported_and_not_counted() -> None:
    model, opt, _ = _opt(SkippingPrecision(skip={2}))
    results = []
    for _ in range(3):
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
        results.append(opt.step_was_skipped)
    assert results == [False, True, False]
    assert opt.steps_taken == 2


def test_partial_window_rescale_applies_once_and_unscale_once() -> None:
    precision = SkippingPrecision(skip=set())
    model, opt, _ = _opt(precision)
    model(torch.ones(1, 3)).sum().backward()
    grad = model.weight.grad.clone()
    opt._pending_rescale = 3.0
    opt.prepare_grads()
    opt.prepare_grads()  # clipping twice must not rescale twice
    assert torch.allclose(model.weight.grad, grad * 3)
    assert precision.unscaled == 1
    opt.step()
    assert precision.unscaled == 1
    assert opt._pending_rescale == 1.0


def test_unknown_attributes_come_from_the_wrapped_optimizer() -> None:
    _, opt, _ = _opt()
    opt.optimizer.custom_flag = "yes"  # type: ignore[attr-defined]
    assert opt.custom_flag == "yes"
