"""A small training script the simulation tests run (written to a file by each test)."""

from __future__ import annotations

TRAIN_SCRIPT = """\
import torch
from overdrive import Accelerator

acc = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
for _ in range(10):
    acc.backward(model(torch.randn(16, 64)).sum())
    opt.step()
    opt.zero_grad()
"""
