"""The one-process reference the parallelism scripts compare against: the unsplit model
trained on the whole global batches, with the same accumulation and clipping at 1.0; and
the same run in other orders of summation, whose spread is the arithmetic noise the tests
derive their tolerances from (``tests/helpers/noise.py``)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


def train_reference(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[Any],
    loss_of: Callable[[nn.Module, Any], torch.Tensor],
    accum: int = 1,
    *,
    micro_batches: int = 1,
    clip: float = 1.0,
) -> tuple[list[float], list[float]]:
    """(the loss of every batch, the clipped norm of every optimizer step).

    ``micro_batches > 1`` sums each batch's gradient over that many equal slices (a
    pipeline's order of summation) instead of one backward over the whole batch.
    """
    losses, norms = [], []
    for i, batch in enumerate(batches):
        slices = zip(*(t.chunk(micro_batches) for t in batch), strict=True)
        parts = [loss_of(model, list(s)) for s in slices]
        for part in parts:
            (part / (accum * len(parts))).backward()
        losses.append(torch.stack(parts).mean().item())
        if (i + 1) % accum == 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
            optimizer.step()
            optimizer.zero_grad()
    return losses, norms


def train_other_orders(
    initial: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    batches: Iterable[Any],
    loss_of: Callable[[nn.Module, Any], torch.Tensor],
    accum: int = 1,
    *,
    orders: Iterable[int],
    clip: float = 1.0,
    eval_batch: Any = None,
) -> tuple[dict[str, list[Any]], dict[int, nn.Module]]:
    """The reference again from a copy of ``initial`` once per entry of ``orders`` (slices
    each batch's gradient is summed over): their traces (``noise_losses``, ``noise_norms``,
    ``noise_evals`` on ``eval_batch``) and trained models, keyed by the number of slices."""
    traces: dict[str, list[Any]] = {"noise_losses": [], "noise_norms": [], "noise_evals": []}
    models = {}
    for slices in sorted(set(orders)):
        model = copy.deepcopy(initial)
        losses, norms = train_reference(
            model, make_optimizer(model), batches, loss_of, accum, micro_batches=slices, clip=clip
        )
        traces["noise_losses"].append(losses)
        traces["noise_norms"].append(norms)
        if eval_batch is not None:
            with torch.no_grad():
                traces["noise_evals"].append(float(loss_of(model.eval(), eval_batch)))
        models[slices] = model
    return traces, models
