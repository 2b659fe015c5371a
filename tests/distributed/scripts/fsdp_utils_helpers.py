"""Hugging Face Accelerate's FSDP2 helpers called by hand on two processes (launched with
FSDP2 and ``Block`` units): ``fsdp2_prepare_model``, ``fsdp2_switch_optimizer_parameters``,
``fsdp2_load_full_state_dict`` into a model built on the meta device, and its refusal of an
incomplete state dict on every process. Prints one ``RESULT {json}`` line per process."""

from __future__ import annotations

import json

import torch
from torch import nn

from overdrive import Accelerator
from overdrive.utils import (
    fsdp2_load_full_state_dict,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(8, 2)
        self.register_buffer("offset", torch.full((2,), 0.25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x) + self.offset


def main() -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    reference = Net()
    full = {k: v.clone() for k, v in reference.state_dict().items()}
    x = torch.randn(4, 8)
    with torch.no_grad():
        want = reference(x)

    # fsdp2_prepare_model, then the optimizer re-pointed by hand as Accelerate's prepare does.
    model = Net()
    model.load_state_dict(full)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    old = {name: p.data_ptr() for name, p in model.named_parameters()}
    sharded = fsdp2_prepare_model(accelerator, model)
    again = fsdp2_prepare_model(accelerator, sharded) is sharded
    new = dict(sharded.named_parameters())
    fsdp2_switch_optimizer_parameters(optimizer, {old[n]: p for n, p in new.items()})
    switched = all(
        any(p is q for q in new.values()) for g in optimizer.param_groups for p in g["params"]
    )
    local = sum(p.to_local().numel() for p in new.values())
    total = sum(p.numel() for p in new.values())
    with torch.no_grad():
        prepared_diff = float((sharded(x) - want).abs().max())
    before = new["head.weight"].full_tensor().clone()
    sharded(x).sum().backward()
    optimizer.step()
    stepped = not torch.equal(before, new["head.weight"].full_tensor())

    # A model built empty on the meta device, sharded, then filled from the main process only.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (accelerator.num_processes,))
    with torch.device("meta"):
        empty = Net()
    for block in empty.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(empty, mesh=mesh)
    given = full if accelerator.is_main_process else {}
    fsdp2_load_full_state_dict(accelerator, empty, given)
    loaded_diff = max(
        float((getattr(v, "full_tensor", lambda v=v: v)() - full[k]).abs().max())
        for k, v in empty.state_dict().items()
    )
    with torch.no_grad():
        filled_diff = float((empty(x) - want).abs().max())

    # An incomplete state dict: every process raises (none waits for a broadcast).
    with torch.device("meta"):
        other = Net()
    fully_shard(other, mesh=mesh)
    partial = (
        {k: v for k, v in full.items() if k != "head.bias"} if accelerator.is_main_process else {}
    )
    try:
        fsdp2_load_full_state_dict(accelerator, other, partial)
        refused = ""
    except KeyError as exc:
        refused = str(exc)
    row = {
        "rank": accelerator.process_index,
        "again": again,
        "switched": switched,
        "local": local,
        "total": total,
        "prepared_diff": prepared_diff,
        "stepped": stepped,
        "loaded_diff": loaded_diff,
        "filled_diff": filled_diff,
        "refused": refused,
    }
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
