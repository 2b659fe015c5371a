"""FSDP2 step time: overdrive's prepared model vs the same model wrapped by hand.

    .venv/bin/python bench/fsdp_step/run.py [--nprocs 2] [--repeats 3]

Launches ``worker.py`` ``--repeats`` times on CPU processes with FSDP2 FULL_SHARD and layer
wrapping; reports median and p10 step times and their ratio (overdrive / by hand).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launched import ratio_table, repeated_times  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    flags = ["--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy"]
    flags += ["TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap", "Sequential"]
    worker = [str(HERE / "worker.py"), "--rounds", str(args.rounds)]
    print(ratio_table(repeated_times(args.repeats, args.nprocs, flags, worker)))


if __name__ == "__main__":
    main()
