"""DeepSpeed's ``clip_grad_norm_`` runs the engine's step once per window: when the window
the Accelerator hands over at the call closes, and only after a backward that told the engine
so. A micro-batch that skips its backward but clips takes no extra step on cleared grads."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from overdrive.ds.config import build
from overdrive.training.accumulation import GradientState, StepWindow
from overdrive.training.loop_state import LoopState
from tests.unit.test_deepspeed_config import settings_for
from tests.unit.test_strategies_keep_no_loop import loop_parts_kept

pytestmark = pytest.mark.deepspeed


class FakeEngine:
    """Counts the steps asked of it; its boundary is what the last backward set."""

    def __init__(self) -> None:
        self.boundary = True
        self.steps = 0
        self.optimizer = SimpleNamespace(_global_grad_norm=0.5)

    def set_gradient_accumulation_boundary(self, boundary: bool) -> None:
        self.boundary = boundary

    def backward(self, loss: torch.Tensor, **kwargs: object) -> None:
        return None

    def step(self) -> None:
        self.steps += int(self.boundary)  # DeepSpeed steps whenever its boundary is set

    def was_step_applied(self) -> bool:
        return True

    def get_global_grad_norm(self) -> float:
        return 0.5


def _strategy(tmp_path: Path, engine: FakeEngine) -> object:
    from overdrive.strategies.deepspeed import DeepSpeedStrategy

    strategy = DeepSpeedStrategy(torch.device("cpu"), build(settings_for(tmp_path, {})))
    strategy.engine = engine  # type: ignore[assignment]
    return strategy


PARAMS = [torch.nn.Parameter(torch.zeros(2))]


@pytest.mark.parametrize("k", [1, 2])
def test_a_micro_batch_that_skips_backward_but_clips_takes_no_step(tmp_path: Path, k: int) -> None:
    engine = FakeEngine()
    strategy = _strategy(tmp_path, engine)
    gradient_state = GradientState(k)
    window = StepWindow(gradient_state, LoopState(), [])
    for _ in range(k):  # one whole window, each micro-batch with its backward
        gradient_state.advance(end_of_dataloader=False)
        strategy.backward(torch.tensor(1.0), window)
    assert float(strategy.clip_grad_norm_(PARAMS, 1.0, window=window)) == 0.5
    assert strategy.optimizer_step(None, None) and engine.steps == 1  # type: ignore[arg-type]
    gradient_state.advance(end_of_dataloader=False)  # the next micro-batch: no backward
    norm = strategy.clip_grad_norm_(PARAMS, 1.0, window=window)
    assert engine.steps == 1 and float(norm) == 0.5  # the last step's norm, no new step
    assert loop_parts_kept(strategy, window, gradient_state) == []  # type: ignore[arg-type]


def test_clipping_twice_in_one_window_steps_once(tmp_path: Path) -> None:
    engine = FakeEngine()
    strategy = _strategy(tmp_path, engine)
    gradient_state = GradientState(1)
    window = StepWindow(gradient_state, LoopState(), [])
    gradient_state.advance(end_of_dataloader=False)
    strategy.backward(torch.tensor(1.0), window)
    strategy.clip_grad_norm_(PARAMS, 1.0, window=window)
    strategy.clip_grad_norm_(PARAMS, math.inf, window=window)  # e.g. to log the norm
    assert strategy.optimizer_step(None, None) and engine.steps == 1  # type: ignore[arg-type]


def test_inside_a_window_a_clip_steps_nothing(tmp_path: Path) -> None:
    engine = FakeEngine()
    strategy = _strategy(tmp_path, engine)
    gradient_state = GradientState(2)
    window = StepWindow(gradient_state, LoopState(), [])
    gradient_state.advance(end_of_dataloader=False)
    strategy.backward(torch.tensor(1.0), window)
    assert math.isnan(float(strategy.clip_grad_norm_(PARAMS, 1.0, window=window)))
    assert engine.steps == 0


def test_an_optimizer_step_after_a_skipped_backward_steps_nothing(tmp_path: Path) -> None:
    """Without a clip too: the engine steps once per backward that closed a window (as in
    Hugging Face Accelerate, where the engine's step runs inside that backward)."""
    engine = FakeEngine()
    strategy = _strategy(tmp_path, engine)
    gradient_state = GradientState(1)
    window = StepWindow(gradient_state, LoopState(), [])
    gradient_state.advance(end_of_dataloader=False)
    strategy.backward(torch.tensor(1.0), window)
    assert strategy.optimizer_step(None, None) and engine.steps == 1  # type: ignore[arg-type]
    gradient_state.advance(end_of_dataloader=False)  # no backward this time
    assert not strategy.optimizer_step(None, None)  # type: ignore[arg-type]
    assert engine.steps == 1
