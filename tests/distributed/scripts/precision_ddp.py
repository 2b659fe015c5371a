"""Train the same model 20 steps under DDP in fp32, bf16 and fp16 (and fp16 with an inf in one
rank's batch at one step); rank 0 writes the results.

Usage: precision_ddp.py OUT.json. Each rank sees its own half of every global batch.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from overdrive import GradScalerKwargs
from overdrive.accelerator import Accelerator

STEPS = 20


def train(mode: str, poison: tuple[int, int] | None = None) -> dict[str, object]:
    """``poison`` = (rank, step): that rank's batch holds an inf at that step only."""
    # fp16 starts at a scale the first gradients do not overflow, so no step is skipped and
    # the run is comparable step by step with fp32.
    handlers = [GradScalerKwargs(init_scale=1024.0)] if mode == "fp16" else []
    acc = Accelerator(cpu=True, mixed_precision=mode, kwargs_handlers=handlers)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    rank, world = acc.process_index, acc.num_processes
    losses, skipped = [], []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16 * world, 16, generator=g)
        y = torch.sin(x[:, :4].sum(dim=1, keepdim=True))  # a target the model can learn
        x, y = x[rank::world], y[rank::world]
        if poison == (rank, step):
            x[0, 0] = float("inf")
        loss = nn.functional.mse_loss(model(x), y)
        assert loss.dtype == torch.float32, loss.dtype
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        if acc.optimizer_step_was_skipped:
            skipped.append(step)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    seen = [None] * world
    dist.all_gather_object(seen, skipped)
    flat = torch.cat([p.detach().reshape(-1) for p in acc.unwrap_model(model).parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    in_sync = all(torch.equal(c, copies[0]) for c in copies)
    return {"losses": losses, "params": flat.tolist(), "skipped": seen, "in_sync": in_sync}


def main() -> None:
    results = {mode: train(mode) for mode in ("no", "bf16", "fp16")}
    results["fp16_inf_on_rank1"] = train("fp16", poison=(1, 5))
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
