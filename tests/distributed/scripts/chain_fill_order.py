"""The order of the parallelize chain's steps on a model that the second process builds
empty (``fsdp_cpu_ram_efficient_loading``), or with other weights (``--sync``:
``sync_module_states``): FSDP2 alone, or tensor parallelism of 2 first.

Each process records, in order, the tensor-parallel split (``parallelize_module``), the
wrap step (``fully_shard``, or the replication of what the plan left whole) and the fill
(``to_empty``, the empty process's first allocation of its part); then the prepared model's
weights, gathered whole, are compared with the main process's unsplit copy.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch
import torch.distributed.fsdp as fsdp
import torch.distributed.tensor.parallel as tensor_parallel
from torch import nn

import overdrive.parallel.chain as chain
from overdrive import Accelerator
from overdrive.utils import FullyShardedDataParallelPlugin, ParallelismConfig

EVENTS: list[str] = []


def recording(name: str, real: Any) -> Any:
    def record(*args: Any, **kwargs: Any) -> Any:
        if not EVENTS or EVENTS[-1] != name:  # a unit, then the root: one wrap step
            EVENTS.append(name)
        return real(*args, **kwargs)

    return record


def build(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=0)
    parser.add_argument(
        "--sync", action="store_true", help="sync_module_states: rank 1 builds other weights"
    )
    args = parser.parse_args()
    tensor_parallel.parallelize_module = recording("split", tensor_parallel.parallelize_module)
    fsdp.fully_shard = recording("wrap", fsdp.fully_shard)
    chain.replicate_leftovers = recording("wrap", chain.replicate_leftovers)  # type: ignore[attr-defined]
    nn.Module.to_empty = recording("fill", nn.Module.to_empty)  # type: ignore[method-assign]
    kwargs: dict[str, Any] = {}
    if args.tp:
        plan = {"0": "colwise", "2": "rowwise"}
        kwargs["parallelism_config"] = ParallelismConfig(tp_size=args.tp, tp_plan=plan)
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, cpu_ram_efficient_loading=not args.sync, sync_module_states=args.sync
    )
    acc = Accelerator(cpu=True, fsdp_plugin=plugin, **kwargs)
    reference = build()
    if args.sync:
        model = build(seed=acc.process_index)
    else:
        with acc.cpu_ram_efficient_init():
            model = build()
    born_empty = any(p.is_meta for p in model.parameters())
    model = acc.prepare(model)
    expected = dict(reference.named_parameters())
    same = True
    for name, param in model.named_parameters():  # every process's part, gathered whole
        full = param.full_tensor() if hasattr(param, "full_tensor") else param
        same = same and torch.equal(full.detach(), expected[name].detach())
    row = {"rank": acc.process_index, "born_empty": born_empty, "events": EVENTS, "same": same}
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
