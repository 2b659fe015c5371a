"""Strategies are told what they need of the loop, at the call or when the Accelerator
changes it; none keeps the loop's view, its gradient state, a window or a reader of them."""

from __future__ import annotations

from collections.abc import Iterator
from types import FunctionType, MethodType, SimpleNamespace

import torch

from overdrive.accelerator import Accelerator
from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.topology import Topology
from overdrive.strategies.base import Strategy, TrainingLoop
from overdrive.training.accumulation import GradientState, StepWindow
from overdrive.training.loop_state import LoopState


def _reachable(root: object) -> Iterator[object]:
    """Everything ``root`` holds: its attributes, containers' items, and the cells of every
    function or bound method it keeps (closures), followed through overdrive's own objects."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, dict):
            todo += [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo += list(obj)
        elif isinstance(obj, MethodType):
            todo += [obj.__self__, obj.__func__]
        elif isinstance(obj, FunctionType):
            todo += [cell.cell_contents for cell in obj.__closure__ or ()]
        elif type(obj).__module__.startswith("overdrive"):
            todo += list(getattr(obj, "__dict__", {}).values())
            for name in getattr(type(obj), "__slots__", ()):
                todo += [getattr(obj, name, None)]


def loop_parts_kept(strategy: Strategy, *loop_parts: object) -> list[object]:
    """What ``strategy`` holds of the loop: any of ``loop_parts`` or of the loop's types."""
    wanted = {id(part) for part in loop_parts}
    return [
        obj
        for obj in _reachable(vars(strategy))
        if id(obj) in wanted or isinstance(obj, (GradientState, TrainingLoop, StepWindow))
    ]


def _pipeline_strategy() -> Strategy:
    from overdrive.strategies.pipeline import PipelineParallelStrategy, PPSettings

    topology = Topology(ParallelLayout(pp=2), "cpu")
    pp = PPSettings(degree=2, micro_batches=2, schedule="GPipe")
    return PipelineParallelStrategy(torch.device("cpu"), topology, pp)


def test_the_pipeline_keeps_no_reference_to_the_loop_after_prepare() -> None:
    strategy = _pipeline_strategy()
    gradient_state = GradientState(3)
    loop = TrainingLoop.of(2, gradient_state, [SimpleNamespace(batch_size=4)])
    strategy.prepare_engine([], [], loop)
    assert loop_parts_kept(strategy, loop, gradient_state) == []


def test_the_pipeline_divides_its_loss_by_the_window_it_was_told() -> None:
    """The loss inside the schedule is divided by micro-batches x k, with k as prepare saw it
    and as the Accelerator says it afterwards (the gradient_accumulation_steps setter)."""
    from overdrive.strategies.pipeline import PipelineParallelStrategy

    strategy = _pipeline_strategy()
    assert isinstance(strategy, PipelineParallelStrategy)
    gradient_state = GradientState(3)
    strategy.prepare_engine([], [], TrainingLoop.of(2, gradient_state, []))
    scaled = strategy._scaled(lambda output, target: output.sum())
    assert float(scaled(torch.tensor(12.0), torch.tensor(0.0))) == 2.0  # 12 / (2 x 3)
    gradient_state.num_steps = 1  # not told: the strategy reads no live state
    assert float(scaled(torch.tensor(12.0), torch.tensor(0.0))) == 2.0
    strategy.set_accumulation_steps(6)
    assert float(scaled(torch.tensor(12.0), torch.tensor(0.0))) == 1.0  # 12 / (2 x 6)


def test_the_accelerator_tells_its_strategy_each_new_window_length() -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    told: list[int] = []
    accelerator.strategy.set_accumulation_steps = told.append  # type: ignore[method-assign]
    accelerator.gradient_accumulation_steps = 4
    assert told == [4] and accelerator.gradient_state.num_steps == 4


def test_the_loop_view_holds_values_only() -> None:
    """The view a strategy gets at prepare: the window's length as it is then, and the
    batch sizes of the loaders prepared so far; later loaders and windows do not show."""
    gradient_state = GradientState(2)
    loaders: list[object] = [SimpleNamespace(batch_size=4)]
    loop = TrainingLoop.of(1, gradient_state, loaders)
    gradient_state.num_steps = 5
    loaders.append(SimpleNamespace(batch_size=8))
    assert loop.accumulation_steps == 2 and loop.batch_sizes == (4,)
    assert [obj for obj in _reachable(vars(loop)) if obj is loaders or callable(obj)] == []


def test_a_window_holds_a_copy_of_the_loader_list() -> None:
    """The window handed at each backward and clip reads the loaders prepared at that call,
    never the Accelerator's live list."""
    loaders: list[object] = []
    window = StepWindow(GradientState(2), LoopState(), loaders)
    assert [obj for obj in _reachable(window) if obj is loaders] == []
