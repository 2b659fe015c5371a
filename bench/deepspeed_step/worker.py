"""One process of the DeepSpeed step benchmark (started by run.py through torchrun).

Builds the same small transformer three times, with the same seed and batches: ``raw`` through
``deepspeed.initialize`` with a hand-written loop (``engine(x)``, ``engine.backward``,
``engine.step``), and ``overdrive`` through ``Accelerator`` + ``prepare`` with the plain
loop (``accelerator.backward``, ``clip_grad_norm_``, ``optimizer.step``, ``zero_grad``).
``raw_control`` is a second raw copy (an A/A comparison: the noise floor). All use the ZeRO
stage given, AdamW and clipping at 1.0. Then ``--rounds`` rounds, each
timing a block of ``--steps`` steps per implementation in an order rotated every round.
Rank 0 prints one JSON line: implementation -> list of per-step times of each block.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH, SEQ, WIDTH = 8, 32, 64


def make_model() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=4 * WIDTH, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Linear(WIDTH, WIDTH))


def build_raw(stage: int):
    import deepspeed

    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()

    return step


def build_overdrive(stage: int):
    from overdrive import Accelerator, DeepSpeedPlugin

    plugin = DeepSpeedPlugin(zero_stage=stage, gradient_clipping=1.0)
    acc = Accelerator(cpu=True, deepspeed_plugin=plugin)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(torch.zeros(BATCH, SEQ, WIDTH)), batch_size=BATCH)
    model, opt, _ = acc.prepare(model, opt, loader)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    batches = [
        (torch.randn(BATCH, SEQ, WIDTH, generator=g), torch.randn(BATCH, SEQ, WIDTH, generator=g))
        for _ in range(args.steps)
    ]
    steps = {
        "raw": build_raw(args.stage),
        "overdrive": build_overdrive(args.stage),
        "raw_control": build_raw(args.stage),  # a second raw copy: the noise floor
    }
    for name in steps:
        for i in range(args.warmup):
            steps[name](*batches[i % len(batches)])
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            dist.barrier()
            start = time.perf_counter()
            for x, y in batches:
                steps[name](x, y)
            dist.barrier()
            times[name].append((time.perf_counter() - start) / len(batches))
    if dist.get_rank() == 0:
        print("TIMES " + json.dumps(times), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
