"""FSDP2 step time: overdrive's prepared model vs the same model wrapped by hand.

    .venv/bin/python bench/fsdp_step/run.py [--nprocs 2] [--repeats 3]

Launches ``worker.py`` ``--repeats`` times on CPU processes with FSDP2 FULL_SHARD and layer
wrapping; reports median and p10 step times and their ratio (overdrive / by hand).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    cmd = [sys.executable, "-m", "overdrive", "launch", "--cpu", "-q", "--no_rank_prefix"]
    cmd += ["--num_processes", str(args.nprocs), "--use_fsdp", "--fsdp_version", "2"]
    cmd += ["--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"]
    cmd += ["--fsdp_transformer_layer_cls_to_wrap", "Sequential"]
    cmd += [str(HERE / "worker.py"), "--rounds", str(args.rounds)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    times: dict[str, list[float]] = {"raw": [], "overdrive": []}
    for _ in range(args.repeats):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
        if done.returncode or not lines:
            raise SystemExit(f"failed:\n{done.stdout}\n{done.stderr}")
        for name, values in json.loads(lines[-1][len("RESULT ") :]).items():
            times[name].extend(values)
    raw_med = statistics.median(times["raw"])
    raw_p10 = statistics.quantiles(times["raw"], n=10)[0]
    print("| implementation | median step (ms) | ratio | p10 step (ms) | ratio | steps |")
    print("|---|---|---|---|---|---|")
    for name, values in times.items():
        med, p10 = statistics.median(values), statistics.quantiles(values, n=10)[0]
        print(
            f"| {name} | {med * 1e3:.3f} | {med / raw_med:.3f}x | {p10 * 1e3:.3f} | "
            f"{p10 / raw_p10:.3f}x | {len(values)} |"
        )


if __name__ == "__main__":
    main()
