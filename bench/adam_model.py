"""Shared by the checkpoint benchmarks: a large prepared model with Adam state."""

from __future__ import annotations

import torch
from torch import nn

from overdrive import Accelerator


def prepared_adam_model(acc: Accelerator, gb: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Linear(4096, 4096) layers holding ``gb`` GB of fp32 parameters, prepared with Adam,
    after one step on zero gradients (so the optimizer state exists, without a forward)."""
    width = 4096
    layers = max(1, round(gb * 1e9 / (4 * width * width)))
    with acc.cpu_ram_efficient_init():
        model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model, opt = acc.prepare(model, opt)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt
