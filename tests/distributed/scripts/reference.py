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
) -> tuple[list[float], list[float]]:
    """(the loss of every batch, the clipped norm of every optimizer step)."""
    losses, norms = [], []
    for i, batch in enumerate(batches):
        loss = loss_of(model, batch)
        (loss / accum).backward()
        losses.append(loss.item())
        if (i + 1) % accum == 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            optimizer.step()
            optimizer.zero_grad()
    return losses, norms
