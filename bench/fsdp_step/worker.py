"""Per-step time of the same FSDP2 model: prepared by overdrive vs wrapped by hand.

Both copies live in one launch (same processes, same mesh) and alternate in blocks of
``--steps`` timed steps, so a slow phase of a shared machine hits both. Prints the step
times of each block as ``RESULT {json}`` on the main process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: shared helpers

from launched import report_alternating  # noqa: E402

from overdrive import Accelerator  # noqa: E402


def build(layers: int, width: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers)]
    )


def by_hand(model: nn.Sequential, world: int) -> nn.Module:
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    acc = Accelerator(cpu=True)
    ours = build(args.layers, args.width)
    ours_opt = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    ours, ours_opt = acc.prepare(ours, ours_opt)
    raw = by_hand(build(args.layers, args.width), acc.num_processes)
    raw_opt = torch.optim.AdamW(raw.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width)

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
