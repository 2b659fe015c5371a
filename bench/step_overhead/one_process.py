"""What overdrive's wrapper calls cost per step, without DDP or a process group.

The step of ``worker.py`` (MLP 32-128-128-10, batch 32, AdamW, clipping) on one process,
raw PyTorch vs overdrive, timed in alternating blocks of 200 steps; prints the medians.

    .venv/bin/python bench/step_overhead/one_process.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from overdrive.accelerator import Accelerator


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def main(blocks: int = 30, steps: int = 200) -> None:
    torch.set_num_threads(1)
    x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
    loss_fn = nn.CrossEntropyLoss()
    model, opt = build()

    def raw() -> None:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    acc = Accelerator(cpu=True)
    od_model, od_opt = acc.prepare(*build())

    def overdrive() -> None:
        acc.backward(loss_fn(od_model(x), y))
        acc.clip_grad_norm_(od_model.parameters(), 1.0)
        od_opt.step()
        od_opt.zero_grad()

    impls: list[tuple[str, Callable[[], None]]] = [("raw", raw), ("overdrive", overdrive)]
    times: dict[str, list[float]] = {name: [] for name, _ in impls}
    for block in range(blocks):
        for name, step in impls if block % 2 else impls[::-1]:
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    a, b = (statistics.median(times[name]) for name in ("raw", "overdrive"))
    print(f"one process, no DDP: raw {a:.1f} us, overdrive {b:.1f} us ({b / a:.3f}x)")


if __name__ == "__main__":
    main()
