"""Tensor- or pipeline-parallel step time: overdrive's prepared model vs the same plan by hand.

    .venv/bin/python bench/parallel/run.py [--nprocs 2] [--repeats 3] [--pipeline]
    .venv/bin/python bench/parallel/run.py --nprocs 4 --composed --tp 2   # pipeline x tp
    .venv/bin/python bench/parallel/run.py --nprocs 4 --composed --dp 2   # pipeline x dp
    .venv/bin/python bench/parallel/run.py --nprocs 4 --composed --shard 2   # pipeline x FSDP2
    .venv/bin/python bench/parallel/run.py --nprocs 8 --composed --tp 2 --shard 2   # 2x2x2

Launches ``worker.py`` ``--repeats`` times on CPU processes, all of them one tp group (the
plan: every block's up projection colwise, its down projection rowwise); with
``--pipeline``, ``pp_worker.py``: one pipeline stage per process, 1F1B over 4
micro-batches; with ``--composed``, ``composed_worker.py``: a pipeline over what ``--tp``
and ``--dp`` leave of the processes, each stage split over ``tp`` or replicated ``dp``
times. Reports median and p10 step times and their ratio (overdrive / by hand).
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
    p.add_argument("--composed", action="store_true", help="pipeline x (--tp or --dp)")
    p.add_argument("--tp", type=int, default=1, help="with --composed: tp degree per stage")
    p.add_argument("--dp", type=int, default=1, help="with --composed: replicas per stage")
    p.add_argument("--shard", type=int, default=1, help="with --composed: FSDP2 shards per stage")
    args = p.parse_args()
    flags: list[str] = []  # the degrees and the plans are given in code
    script = "pp_worker.py" if args.pipeline else "worker.py"
    script = "composed_worker.py" if args.composed else script
    worker = [str(HERE / script), "--rounds", str(args.rounds)]
    worker += ["--raw-also-shards"] if args.raw_also_shards else []
    if args.composed:
        worker += ["--tp", str(args.tp), "--dp", str(args.dp), "--shard", str(args.shard)]
    print(ratio_table(repeated_times(args.repeats, args.nprocs, flags, worker)))


if __name__ == "__main__":
    main()
