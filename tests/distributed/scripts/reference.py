"""The one-process reference the parallelism scripts compare against: the unsplit model
trained on the whole global batches, with the same accumulation and clipping at 1.0."""

from __future__ import annotations

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
