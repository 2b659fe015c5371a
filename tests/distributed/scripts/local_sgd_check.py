"""LocalSGD on 2 processes: each trains on its own data; parameters are averaged every 2
optimizer steps and when the block ends. Prints ``RESULT {json}`` per rank."""

from __future__ import annotations

import json

import torch
from torch import nn

from overdrive import Accelerator
from overdrive.local_sgd import LocalSGD


def params(model: nn.Module) -> list[float]:
    return [float(p.detach().double().sum()) for p in model.parameters()]


def main() -> None:
    acc = Accelerator()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    g = torch.Generator().manual_seed(10 + acc.process_index)  # each process its own data
    seen: dict[str, list[float]] = {}
    with LocalSGD(acc, model, local_sgd_steps=2) as local_sgd:
        for step in range(3):
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
            loss = nn.functional.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            seen[f"before_{step}"] = params(model)  # not averaged yet: the processes differ
            local_sgd.step()
            seen[f"after_{step}"] = params(model)
    seen["end"] = params(model)
    print("RESULT " + json.dumps({"rank": acc.process_index, **seen}), flush=True)


if __name__ == "__main__":
    main()
