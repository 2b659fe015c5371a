"""Alternating timed blocks of raw and overdrive steps, within a share of the time budget.

The house method (``bench/launched.py``'s ``alternate``): warm-up steps first, then rounds in
which each side times a block of steps, the order reversed every other round, so a slow phase
of the machine hits both. Each step ends with ``sync`` (the device finishing its queued work),
so a step's time is the device's time, not the time to enqueue it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

Step = Callable[[torch.Tensor], None]


@dataclass(frozen=True)
class Plan:
    """How many steps: ``warmup`` untimed per side, blocks of ``steps``, ``min_rounds`` rounds
    always, more until the variant's share of the budget is spent or ``max_rounds``."""

    warmup: int
    steps: int
    min_rounds: int
    max_rounds: int


GPU_PLAN = Plan(warmup=5, steps=10, min_rounds=3, max_rounds=30)
SMOKE_PLAN = Plan(warmup=1, steps=2, min_rounds=2, max_rounds=2)


def device_sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def alternate_until(
    impls: dict[str, Step],
    batches: list[torch.Tensor],
    plan: Plan,
    deadline: float,
    sync: Callable[[], None],
) -> dict[str, list[float]]:
    """Per-step seconds of each implementation; rounds stop at ``deadline``
    (``time.perf_counter()`` value) once ``plan.min_rounds`` have run."""
    clock = time.perf_counter
    for name in impls:
        for i in range(plan.warmup):
            impls[name](batches[i % len(batches)])
        sync()
    times: dict[str, list[float]] = {name: [] for name in impls}
    for r in range(plan.max_rounds):
        if r >= plan.min_rounds and clock() >= deadline:
            break
        for name in list(impls) if r % 2 == 0 else list(reversed(impls)):
            for i in range(plan.steps):
                start = clock()
                impls[name](batches[i % len(batches)])
                sync()
                times[name].append(clock() - start)
    return times


@dataclass(frozen=True)
class Summary:
    """Median and 10th-percentile step times (seconds) and how many steps were timed."""

    median: float
    p10: float
    count: int


def summarise(values: list[float]) -> Summary:
    p10 = statistics.quantiles(values, n=10)[0] if len(values) > 1 else values[0]
    return Summary(statistics.median(values), p10, len(values))
