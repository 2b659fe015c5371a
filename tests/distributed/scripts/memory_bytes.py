"""One AdamW step of a model, then the bytes each process holds in parameters, gradients and
optimizer state, read off the tensors (a DTensor counts its local shard).

    overdrive launch ... memory_bytes.py CONFIG_JSON     # a transformers config, built for real

Prints ``RESULT {json}`` per rank: rank, params, grads, optimizer (bytes). The backend and
precision come from launch flags; tests/unit and tests/distributed test_estimate_memory.py
compare these with `overdrive estimate-memory`.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

from overdrive.accelerator import Accelerator


def local_bytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def measure(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state tensors (the step counter, a
    0-dim tensor, left out) this process holds."""
    inner = getattr(optimizer, "optimizer", optimizer)
    params = list(model.parameters())
    return {
        "params": sum(local_bytes(p) for p in params),
        "grads": sum(local_bytes(p.grad) for p in params),
        "optimizer": sum(
            local_bytes(v)
            for state in inner.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        ),
    }


def build(config_path: str) -> nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_path))


def step(acc: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    vocab = acc.unwrap_model(model).config.vocab_size
    ids = torch.randint(0, vocab, (2, 8), generator=torch.Generator().manual_seed(1))
    acc.backward(model(input_ids=ids, labels=ids).loss)
    optimizer.step()


def main() -> None:
    acc = Accelerator(cpu=True)
    model = build(sys.argv[1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = acc.prepare(model, optimizer)
    step(acc, model, optimizer)
    row = {"rank": acc.process_index, **measure(model, optimizer)}
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
