"""Tensor- or pipeline-parallel step time: overdrive's prepared model vs the same plan by hand.

    .venv/bin/python bench/parallel/run.py [--nprocs 2] [--repeats 3] [--pipeline]

Launches ``worker.py`` ``--repeats`` times on CPU processes, all of them one tp group (the
plan: every block's up projection colwise, its down projection rowwise); with
``--pipeline``, ``pp_worker.py``: one pipeline stage per process, 1F1B over 4
micro-batches. Reports median and p10 step times and their ratio (overdrive / by hand).
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
    p.add_argument(
        "--raw-also-shards",
        action="store_true",
        help="the hand-written copy also runs fully_shard over a data-parallel mesh of size 1",
    )
    p.add_argument("--pipeline", action="store_true", help="pipeline stages instead of tp")
    args = p.parse_args()
    flags: list[str] = []  # the degrees and the plans are given in code
    script = "pp_worker.py" if args.pipeline else "worker.py"
    worker = [str(HERE / script), "--rounds", str(args.rounds)]
    worker += ["--raw-also-shards"] if args.raw_also_shards else []
    print(ratio_table(repeated_times(args.repeats, args.nprocs, flags, worker)))


if __name__ == "__main__":
    main()
