"""One training step, then this process's parameter, gradient and optimizer-state bytes.

Run under ``overdrive launch`` with the backend as flags (see run.py). Bytes are read off the
tensors each process actually holds after the step (a DTensor counts its local shard, FSDP1
counts its flat shard through the parameter views), not computed from a formula.
"""

from __future__ import annotations

import argparse
import json

import torch
from model import Stack

from overdrive import Accelerator


def local_bytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=2048)
    args = p.parse_args()
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = Stack(args.layers, args.width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    loss = model(torch.randn(4, args.width)).square().mean()
    acc.backward(loss)
    opt.step()
    params = sum(local_bytes(q) for q in model.parameters())
    grads = sum(local_bytes(q.grad) for q in model.parameters())
    state = sum(
        local_bytes(v)
        for s in opt.optimizer.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    row = torch.tensor([params, grads, state], dtype=torch.float64)
    rows = acc.gather(row.unsqueeze(0))
    if acc.is_main_process:
        total = args.layers * (args.width * args.width + args.width) * 4
        out = {
            "type": str(acc.distributed_type),
            "world": acc.num_processes,
            "model_bytes": total,
            "per_rank": rows.tolist(),
        }
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
