"""DeepSpeed's storage of the tiny Llama after one AdamW step: the module's parameters (a
ZeRO-3 parameter counts its partition), AdamW's states and the fp32 master partitions the
ZeRO optimizer keeps, per process, as ``RESULT {json}``.

    overdrive launch --use_deepspeed --zero_stage N --mixed_precision bf16 \\
        memory_bytes_ds.py CONFIG_JSON

Reads DeepSpeed's ZeRO optimizer attributes (``single_partition_of_fp32_groups`` for stages
1-2, ``fp32_partitioned_groups_flat`` for stage 3). Gradients live in DeepSpeed's own buffers
and are not counted.
"""

from __future__ import annotations

import json
import sys

import torch
from memory_bytes import build, local_bytes
from torch.utils.data import DataLoader, TensorDataset

from overdrive.accelerator import Accelerator


def main() -> None:
    acc = Accelerator()
    model = build(sys.argv[1])
    vocab = model.config.vocab_size
    data = torch.randint(0, vocab, (8, 8), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(data), batch_size=2)  # gives DeepSpeed its batch size
    engine, optimizer, loader = acc.prepare(model, optimizer, loader)
    (ids,) = next(iter(loader))
    acc.backward(engine(input_ids=ids, labels=ids).loss)
    optimizer.step()
    zero = engine.optimizer
    masters = getattr(zero, "single_partition_of_fp32_groups", None)
    if masters is None:
        masters = zero.fp32_partitioned_groups_flat
    params = [getattr(p, "ds_tensor", p) for p in engine.module.parameters()]
    row = {
        "rank": acc.process_index,
        "params": sum(local_bytes(p) for p in params),
        "param_dtype": str(params[0].dtype),
        "states": sum(
            local_bytes(v)
            for state in zero.optimizer.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        ),
        "masters": sum(local_bytes(t) for t in masters),
    }
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
