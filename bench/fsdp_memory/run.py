"""Per-process memory of parameters + gradients + optimizer state: DDP vs FSDP sharding.

For each world size (2 and 4 CPU processes) and backend (DDP, FSDP SHARD_GRAD_OP, FSDP
FULL_SHARD; FSDP2 by default), launches ``worker.py`` through ``overdrive launch`` and
reports the largest per-process total with its ratio to DDP and to DDP/N, and what
`overdrive estimate-memory` predicts for the same model (``model.py:Stack``) beside it.

    .venv/bin/python bench/fsdp_memory/run.py [--fsdp_version 2] [--layers 12 --width 2048]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launched import launch_result  # noqa: E402

BACKENDS = {
    "DDP": [],
    "SHARD_GRAD_OP": ["--use_fsdp", "--fsdp_sharding_strategy", "SHARD_GRAD_OP"],
    "FULL_SHARD": ["--use_fsdp", "--fsdp_sharding_strategy", "FULL_SHARD"],
}


def estimated_total(world: int, backend: str, args: argparse.Namespace) -> int:
    """Parameters + gradients + optimizer bytes `overdrive estimate-memory` predicts."""
    import torch
    from model import Stack

    from overdrive.memory_estimate import STRATEGIES, estimate, layout_of
    from overdrive.memory_estimate.build import spec_from_module

    with torch.device("meta"):
        spec = spec_from_module(Stack(args.layers, args.width), source="model.py:Stack")
    strategy = next(s for s in STRATEGIES if s.name.split()[-1] == backend)
    return estimate(spec, layout_of(num_processes=world), "fp32", strategy).state


def run(nprocs: int, flags: list[str], args: argparse.Namespace) -> dict:
    if "--use_fsdp" in flags:
        # one unit per layer: only one layer is ever gathered whole
        flags = [*flags, "--fsdp_version", str(args.fsdp_version)]
        flags += ["--fsdp_transformer_layer_cls_to_wrap", "Linear"]
    worker = [str(HERE / "worker.py"), "--layers", str(args.layers), "--width", str(args.width)]
    return launch_result(nprocs, flags, worker)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fsdp_version", type=int, default=2)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--worlds", default="2,4")
    args = p.parse_args()
    head = "| processes | backend | params MB | grads MB | optimizer MB | total MB | vs DDP "
    print(head + "| vs DDP/N | estimate MB | measured / estimate |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for world in [int(w) for w in args.worlds.split(",")]:
        ddp_total = None
        for name, flags in BACKENDS.items():
            out = run(world, flags, args)
            worst = max(out["per_rank"], key=lambda r: sum(r[:3]))
            total = sum(worst[:3])
            ddp_total = ddp_total or total
            mb = [v / 2**20 for v in worst]
            guess = estimated_total(world, name, args)
            print(
                f"| {world} | {name} | {mb[0]:.1f} | {mb[1]:.1f} | {mb[2]:.1f} | "
                f"{total / 2**20:.1f} | {total / ddp_total:.3f} | "
                f"{total / (ddp_total / world):.3f} | {guess / 2**20:.1f} | "
                f"{total / guess:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
