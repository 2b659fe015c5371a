"""Benchmark worker: the same small-MLP DDP step through four frameworks, interleaved.

Started by ``run.py`` with torchrun (2 CPU processes, gloo). Every process builds one model
copy per framework (same seed, same batches); then, round after round, each framework runs
a short block of timed steps, in an order rotated per round, so machine noise falls on all
of them alike. Rank 0 prints one JSON line: per framework, the step times of each block.

    python -m torch.distributed.run --nproc_per_node 2 worker.py --rounds 100 --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

IN, HIDDEN, OUT, BATCH = 32, 128, 10, 32
MAX_NORM = 1.0


def build() -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(IN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, OUT),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + int(os.environ.get("RANK", "0")))
    batches = [
        (torch.randn(BATCH, IN, generator=g), torch.randint(0, OUT, (BATCH,), generator=g))
        for _ in range(16)
    ]
    return model, optimizer, batches


def raw() -> Callable[[torch.Tensor, torch.Tensor], None]:
    model, optimizer, _ = build()
    ddp = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = loss_fn(ddp(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return step


def overdrive() -> Callable[[torch.Tensor, torch.Tensor], None]:
    from overdrive.accelerator import Accelerator

    acc = Accelerator(cpu=True)
    model, optimizer, _ = build()
    model, optimizer = acc.prepare(model, optimizer)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = loss_fn(model(x), y)
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return step


def accelerate() -> Callable[[torch.Tensor, torch.Tensor], None]:
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model, optimizer, _ = build()
    model, optimizer = acc.prepare(model, optimizer)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = loss_fn(model(x), y)
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return step


def fabric() -> Callable[[torch.Tensor, torch.Tensor], None]:
    from lightning_fabric import Fabric

    fab = Fabric(accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]), strategy="ddp")
    fab.launch()
    model, optimizer, _ = build()
    model, optimizer = fab.setup(model, optimizer)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = loss_fn(model(x), y)
        fab.backward(loss)
        fab.clip_gradients(model, optimizer, max_norm=MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return step


IMPLS = {
    "raw": raw,
    "overdrive": overdrive,
    "accelerate": accelerate,
    "fabric": fabric,
    "raw_control": raw,  # a second raw copy: the noise floor of an A/A comparison
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impls", default="raw,overdrive,accelerate,fabric,raw_control")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per block")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--build_offset", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.impls.split(",")
    dist.init_process_group("gloo")  # created here once; every framework reuses it
    # Build order rotates between launches so no implementation is always built first;
    # identical copies still differ by a few percent, which raw_control makes visible.
    k = args.build_offset % len(names)
    steps = {name: IMPLS[name]() for name in names[k:] + names[:k]}
    _, _, batches = build()
    for name in names:
        for i in range(args.warmup):
            steps[name](*batches[i % len(batches)])
    clock = time.perf_counter
    blocks: dict[str, list[list[float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            step = steps[name]
            dist.barrier()
            times = []
            for i in range(args.steps):
                x, y = batches[i % len(batches)]
                t0 = clock()
                step(x, y)
                times.append(clock() - t0)
            blocks[name].append(times)
    dist.barrier()
    if dist.get_rank() == 0:
        print(json.dumps({"blocks": blocks}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
