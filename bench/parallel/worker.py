"""Per-step time of the same tensor-parallel model: prepared by overdrive vs the same plan
applied by hand with ``parallelize_module``.

Both copies live in one launch (same processes, same tp mesh) and alternate in blocks of
``--steps`` timed steps, so a slow phase of a shared machine hits both. Prints the step
times of each block as ``RESULT {json}`` on the main process.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: shared helpers

from launched import report_alternating  # noqa: E402

from overdrive import Accelerator, ParallelismConfig  # noqa: E402

PLAN = {"*.up": "colwise", "*.down": "rowwise"}


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def build(layers: int, width: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[Block(width) for _ in range(layers)])


def by_hand(model: nn.Sequential, tp: int, also_shard: bool) -> nn.Module:
    """The plan applied with ``parallelize_module``; ``also_shard`` adds what overdrive adds
    with one data-parallel process: ``fully_shard`` over a data-parallel mesh of size 1."""
    mesh = init_device_mesh("cpu", (1, tp), mesh_dim_names=("dp_shard", "tp"))
    plan: dict[str, object] = {}
    for i in range(len(model)):
        plan[f"{i}.up"] = ColwiseParallel()
        plan[f"{i}.down"] = RowwiseParallel()
    model = parallelize_module(model, mesh["tp"], plan)
    if also_shard:
        fully_shard(model, mesh=mesh["dp_shard"], reshard_after_forward=False)
    return model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--raw-also-shards", action="store_true")
    args = p.parse_args()
    tp = int(os.environ.get("WORLD_SIZE", "1"))  # every launched process: one tp group
    acc = Accelerator(cpu=True, parallelism_config=ParallelismConfig(tp_size=tp, tp_plan=PLAN))
    ours = build(args.layers, args.width)
    ours_opt = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    ours, ours_opt = acc.prepare(ours, ours_opt)
    raw = by_hand(build(args.layers, args.width), acc.num_processes, args.raw_also_shards)
    raw_opt = torch.optim.AdamW(raw.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(1))

    def step_ours() -> None:
        acc.backward(ours(x).square().mean())
        ours_opt.step()
        ours_opt.zero_grad()

    def step_raw() -> None:
        raw(x).square().mean().backward()
        raw_opt.step()
        raw_opt.zero_grad()

    impls = {"raw": step_raw, "overdrive": step_ours}
    report_alternating(acc, impls, rounds=args.rounds, steps=args.steps)


if __name__ == "__main__":
    main()
