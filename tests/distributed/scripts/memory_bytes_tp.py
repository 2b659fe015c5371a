"""The tiny Llama split over 2 processes by its own tp_plan with raw PyTorch DTensor
(``parallelize_module``; overdrive's tensor parallelism is not used), one AdamW step, then the
bytes each process holds, as memory_bytes.py prints them.

    overdrive launch --cpu --num_processes 2 memory_bytes_tp.py CONFIG_JSON
"""

from __future__ import annotations

import json
import sys

import torch
from memory_bytes import build, measure
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from overdrive.accelerator import Accelerator

STYLES: dict[str, ParallelStyle] = {
    "colwise": ColwiseParallel(),
    "rowwise": RowwiseParallel(),
    "embedding_rowwise": RowwiseParallel(input_layouts=Replicate()),
    "colwise_gather_output": ColwiseParallel(output_layouts=Replicate()),
}


def main() -> None:
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
