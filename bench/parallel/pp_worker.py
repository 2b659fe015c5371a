"""Per-step time of the same pipeline: prepared by overdrive vs the same split and schedule
written by hand with ``torch.distributed.pipelining``.

Both copies live in one launch (same processes, one stage each) and alternate in blocks of
``--steps`` timed steps, so a slow phase of a shared machine hits both. The hand-written
step is what a user of ``torch.distributed.pipelining`` writes: ``schedule.step`` with the
input on the first stage and the target on the last, then the optimizer; overdrive's also
broadcasts the loss to every stage (its contract: ``.loss`` on every process). Prints the
step times of each block as ``RESULT {json}`` on the main process.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: shared helpers

from launched import report_alternating  # noqa: E402
from worker import build  # noqa: E402

from overdrive import Accelerator, MegatronLMPlugin  # noqa: E402


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def by_hand(model: nn.Sequential, micro: int) -> tuple[nn.Module, Schedule1F1B, int, int]:
    """This rank's even slice of the blocks, its stage and a 1F1B schedule."""
    rank, world = dist.get_rank(), dist.get_world_size()
    per = len(model) // world
    stage_module = nn.Sequential(*list(model)[rank * per : (rank + 1) * per])
    stage = PipelineStage(stage_module, rank, world, torch.device("cpu"))
    return stage_module, Schedule1F1B(stage, micro, loss_fn=mse), rank, world


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    pp = int(os.environ.get("WORLD_SIZE", "1"))  # every launched process: one stage
    plugin = MegatronLMPlugin(pp_degree=pp, num_micro_batches=args.micro, pipeline_loss_fn=mse)
    acc = Accelerator(cpu=True, megatron_lm_plugin=plugin)
    ours = build(args.layers, args.width)
    ours_opt = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    ours, ours_opt = acc.prepare(ours, ours_opt)
    raw, schedule, rank, world = by_hand(build(args.layers, args.width), args.micro)
    raw_opt = torch.optim.AdamW(raw.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(args.batch, args.width, generator=g), torch.randn(args.batch, args.width)

    def step_ours() -> None:
        acc.backward(ours(x, labels=y).loss)
        ours_opt.step()
        ours_opt.zero_grad()

    def step_raw() -> None:
        args_ = (x,) if rank == 0 else ()
        schedule.step(*args_, target=y if rank == world - 1 else None, losses=[])
        raw_opt.step()
        raw_opt.zero_grad()

    impls = {"raw": step_raw, "overdrive": step_ours}
    report_alternating(acc, impls, rounds=args.rounds, steps=args.steps)


if __name__ == "__main__":
    main()
