"""Worker: DDP gradient communication hooks chosen with DistributedDataParallelKwargs.

For each hook: one backward on rank-specific data through the prepared model, then compare
its gradient with the plain average of every rank's local gradient (gathered from an
unprepared copy) and with what the hook's compression gives. One RESULT line per rank.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

from overdrive import Accelerator
from overdrive.utils import DistributedDataParallelKwargs


def local_grad(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    model(x).pow(2).mean().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def main() -> None:
    hook, wrapper = sys.argv[1], sys.argv[2]
    state_option = {"matrix_approximation_rank": 1, "start_powerSGD_iter": 2}
    kwargs = DistributedDataParallelKwargs(
        comm_hook=hook,
        comm_wrapper=wrapper,
        comm_state_option=state_option if "power_sgd" in hook else {},
    )
    acc = Accelerator(cpu=True, kwargs_handlers=[kwargs])
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    model.load_state_dict(plain.state_dict())
    model = acc.prepare(model)
    row: dict = {"rank": acc.process_index, "hook": hook, "wrapper": wrapper, "steps": []}
    for step in range(4):
        x = torch.randn(
            8, 16, generator=torch.Generator().manual_seed(100 * step + acc.process_index)
        )
        mine = local_grad(plain, x)
        every = [torch.zeros_like(mine) for _ in range(acc.num_processes)]
        torch.distributed.all_gather(every, mine)
        model.zero_grad()
        acc.backward(model(x).pow(2).mean())
        got = torch.cat([p.grad.flatten() for p in model.parameters()])
        mean = torch.stack(every).mean(0)
        halves = [(g / acc.num_processes).half() for g in every]
        fp16_sum = halves[0]
        for h in halves[1:]:
            fp16_sum = fp16_sum + h
        same = [torch.zeros_like(got) for _ in range(acc.num_processes)]
        torch.distributed.all_gather(same, got)
        row["steps"].append(
            {
                "vs_mean": (got - mean).abs().max().item(),
                "vs_fp16": (got - fp16_sum.float()).abs().max().item(),
                "mean_scale": mean.abs().max().item(),
                "ranks_agree": all(torch.equal(same[0], s) for s in same),
            }
        )
    sys.stdout.write("RESULT " + json.dumps(row) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
