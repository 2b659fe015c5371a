"""The tiny Llama split over 2 processes by its own tp_plan, one AdamW step, then the bytes
each process holds, as memory_bytes.py prints them. ``raw``: split with PyTorch's
``parallelize_module``; ``overdrive``: prepared with ``ParallelismConfig(tp_size=2)``.

    overdrive launch --cpu --num_processes 2 memory_bytes_tp.py CONFIG_JSON {raw,overdrive}
"""

from __future__ import annotations

import json
import os
import sys

import torch
from memory_bytes import build, measure, step
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from overdrive import ParallelismConfig
from overdrive.accelerator import Accelerator

STYLES: dict[str, ParallelStyle] = {
    "colwise": ColwiseParallel(),
    "rowwise": RowwiseParallel(),
    "embedding_rowwise": RowwiseParallel(input_layouts=Replicate()),
    "colwise_gather_output": ColwiseParallel(output_layouts=Replicate()),
}


def prepared() -> None:
    world = int(os.environ["WORLD_SIZE"])
    acc = Accelerator(cpu=True, parallelism_config=ParallelismConfig(tp_size=world))
    model = build(sys.argv[1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = acc.prepare(model, optimizer)
    step(acc, model, optimizer)
    row = {"rank": acc.process_index, **measure(model, optimizer)}
    print("RESULT " + json.dumps(row), flush=True)


def main() -> None:
    if sys.argv[2] == "overdrive":
        prepared()
        return
    acc = Accelerator(cpu=True)  # the process group only; the model is not prepared
    mesh = init_device_mesh("cpu", (acc.num_processes,))
    model = build(sys.argv[1])
    plan = {name: STYLES[style] for name, style in model.tp_plan.items()}
    parallelize_module(model, mesh, plan)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(
        0, model.config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(1)
    )
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    row = {"rank": acc.process_index, **measure(model, optimizer)}
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
