"""cpu_ram_efficient_loading: only the main process builds real weights; the others build an
empty model, prepare() fills their shards from the main process.

Prints per process: the peak-memory growth while building and preparing the model, and
whether its model was empty before prepare; the main process checks the prepared weights
equal a model built normally.
"""

from __future__ import annotations

import json
import resource

import torch
from torch import nn

from overdrive.accelerator import Accelerator

LAYERS, WIDTH = 32, 1024


def build() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    model.register_buffer("scale", torch.full((4,), 3.0), persistent=False)
    return model


def peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def warm_up(acc: Accelerator) -> None:
    """Pay for imports and the mesh before measuring, so growth is what the weights cost."""
    import torch.distributed.fsdp
    import torch.distributed.tensor  # noqa: F401

    if hasattr(acc.strategy, "mesh"):
        acc.strategy.mesh  # noqa: B018
    small = acc.prepare(nn.Sequential(nn.Linear(4, 4)))
    small(torch.ones(1, 4)).sum().backward()


def main() -> None:
    acc = Accelerator(cpu=True)
    warm_up(acc)
    before = peak_kb()
    with acc.cpu_ram_efficient_init():
        model = build()
    was_empty = all(p.is_meta for p in model.parameters())
    model = acc.prepare(model)
    grown = peak_kb() - before
    model_bytes = sum(p.numel() * p.element_size() for p in build().parameters())
    full = acc.get_state_dict(model)
    if acc.is_main_process:
        expected = build().state_dict()
        assert all(torch.equal(full[k], v) for k, v in expected.items()), "weights differ"
    inner = acc.unwrap_model(model)
    assert torch.equal(inner.scale.cpu(), torch.full((4,), 3.0)), "buffer not sent"
    row = {"rank": acc.process_index, "grown_kb": grown, "model_kb": model_bytes // 1024}
    row["was_empty"] = was_empty
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
