"""A strategy returns what ``prepare_engine`` decided and the Accelerator applies it: the
strategy reads a view of plain values and keeps nothing of the loop."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from overdrive.ds.config import build
from overdrive.strategies.base import EngineDecision, TrainingLoop
from overdrive.training.accumulation import GradientState, StepWindow
from tests.unit.test_deepspeed_config import settings_for

pytestmark = pytest.mark.deepspeed


def test_deepspeed_returns_the_window_it_imposes_and_keeps_no_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from overdrive.strategies import deepspeed as ds_strategy

    settings = {"deepspeed_config": {"zero_stage": 2, "gradient_accumulation_steps": 4}}
    strategy = ds_strategy.DeepSpeedStrategy(
        torch.device("cpu"), build(settings_for(tmp_path, settings))
    )
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = SimpleNamespace(module=model, basic_optimizer=optimizer, lr_scheduler=None)
    monkeypatch.setattr(ds_strategy, "initialize", lambda *args: engine)
    strategy._deepspeed = SimpleNamespace()  # type: ignore[assignment]  # no import needed

    caplog.set_level(logging.INFO, logger="overdrive.deepspeed")
    gradient_state = GradientState(1)
    loop = TrainingLoop.of(2, gradient_state, [SimpleNamespace(batch_size=3)])
    decision = strategy.prepare_engine([model, optimizer], [model, optimizer], loop)

    assert isinstance(decision, EngineDecision)
    assert decision.accumulation_steps == 4 and gradient_state.num_steps == 1  # not applied
    assert decision.built == {0: engine, 1: optimizer}
    assert "gradient_accumulation_steps is 4, as " in caplog.text
    assert "(the loop's value was 1)" in caplog.text
    kept = list(vars(strategy).values())
    assert not any(value is loop or value is gradient_state for value in kept)


def test_deepspeeds_backward_reads_the_window_handed_at_the_call(tmp_path: Path) -> None:
    """The boundary the engine is told comes from the window the Accelerator hands over at
    each backward; a clip inside that window steps nothing."""
    from overdrive.strategies.deepspeed import DeepSpeedStrategy
    from overdrive.training.loop_state import LoopState

    told: list[bool] = []
    engine = SimpleNamespace(
        set_gradient_accumulation_boundary=told.append, backward=lambda loss, **kw: None
    )
    strategy = DeepSpeedStrategy(torch.device("cpu"), build(settings_for(tmp_path, {})))
    strategy.engine = engine  # type: ignore[assignment]
    gradient_state = GradientState(2)
    gradient_state.advance(end_of_dataloader=False)  # the first of 2 micro-batches
    strategy.backward(torch.tensor(1.0), StepWindow(gradient_state, LoopState(), []))
    window = StepWindow(gradient_state, LoopState(), [])
    norm = strategy.clip_grad_norm_([torch.nn.Parameter(torch.zeros(2))], math.inf, window=window)
    assert told == [False] and math.isnan(float(norm))  # no engine step was asked for
    gradient_state.advance(end_of_dataloader=False)
    strategy.backward(torch.tensor(1.0), StepWindow(gradient_state, LoopState(), []))
    assert told == [False, True]
