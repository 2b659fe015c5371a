"""transformers' Trainer under Hugging Face Accelerate and under overdrive, interleaved.

The same script (``worker.py``: a tiny Llama, 24 optimizer steps) runs under ``accelerate
launch`` (its package from the test-only folder ``make compat`` installs) and under
``overdrive launch`` (the alias answers transformers' ``import accelerate``), on 1 and 2 CPU
processes, engines alternating launch by launch. Reports the median and 10th-percentile step
time of each (the first ``--skip`` steps of every run left out: warm-up), the ratio, and the
minor page faults per step. Each repeat launches both engines one after the other, so it also
gives one paired ratio (overdrive's median step over Accelerate's in that repeat); the median of
those and a bootstrap 95% interval over the repeats say how far the ratio moves with the
machine's own drift between launches.

    .venv/bin/python bench/trainer/run.py [--repeats 4] [--processes 1,2] [--malloc fixed]

``--malloc fixed`` gives both engines the same fixed glibc thresholds (nothing under 32 MiB
mapped apart, no freed heap top under 128 MiB given back to the system). With glibc's
defaults the thresholds move with the sizes a process has freed so far, so whether a step
finds its memory still mapped or faults it in again depends on how the heap was laid out
at start-up, which differs between any two programs importing different modules.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SITE = REPO / ".compat" / "site"


FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}


def launch(engine: str, nprocs: int, out: str, steps: int, malloc: str = "glibc") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    if malloc == "fixed":
        env.update(FIXED_MALLOC)
    env["XDG_CACHE_HOME"] = env["HF_HOME"] = tempfile.mkdtemp()  # no user config file
    worker = [str(HERE / "worker.py"), "--out", out, "--steps", str(steps)]
    if engine == "accelerate":
        env["PYTHONPATH"] = str(SITE)
        cmd = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch"]
        cmd += ["--num_processes", str(nprocs), "--num_machines", "1", "--mixed_precision", "no"]
        cmd += ["--dynamo_backend", "no"]
        # Its --cpu starts one process whatever --num_processes says; on more, torchrun's
        # path (--multi_gpu) with no visible GPU runs CPU processes on gloo.
        cmd.append("--cpu" if nprocs == 1 else "--multi_gpu")
    else:
        env.pop("PYTHONPATH", None)
        cmd = [sys.executable, "-m", "overdrive", "launch", "--cpu", "-q", "--no_rank_prefix"]
        cmd += ["--num_processes", str(nprocs)]
    done = subprocess.run([*cmd, *worker], capture_output=True, text=True, env=env, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        raise SystemExit(
            f"{engine} on {nprocs} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    row = json.loads(lines[-1][len("RESULT ") :])
    # Hugging Face Accelerate's 2-process run sometimes dies at exit, after training and the
    # RESULT line ("terminate called without an active exception", SIGABRT): its timings
    # stand and the crash is counted.
    row["crashed"] = done.returncode != 0
    return row


def paired_interval(ratios: list[float], draws: int = 4000) -> tuple[float, float]:
    """A bootstrap 95% interval of the median of the paired ratios (the repeats resampled)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--processes", default="1,2")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--skip", type=int, default=4, help="warm-up steps left out of each run")
    p.add_argument("--malloc", choices=["glibc", "fixed"], default="glibc",
                   help="glibc's default thresholds, or the same fixed ones for both engines")  # fmt: skip
    args = p.parse_args()
    print(
        "| processes | engine | median step ms | p10 step ms | faults per step | runs | training loss |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for nprocs in [int(x) for x in args.processes.split(",")]:
        times: dict[str, list[float]] = {"accelerate": [], "overdrive": []}
        faults: dict[str, list[int]] = {"accelerate": [], "overdrive": []}
        crashes = {"accelerate": 0, "overdrive": 0}
        losses: dict[str, set[float]] = {"accelerate": set(), "overdrive": set()}
        paired: list[float] = []
        for repeat in range(args.repeats):
            order = ["accelerate", "overdrive"] if repeat % 2 == 0 else ["overdrive", "accelerate"]
            medians = {}
            for engine in order:
                row = launch(engine, nprocs, tempfile.mkdtemp(), args.steps, args.malloc)
                medians[engine] = statistics.median(row["times"][args.skip :])
                times[engine] += row["times"][args.skip :]
                faults[engine] += row["faults"][args.skip :]
                crashes[engine] += row["crashed"]
                losses[engine].add(round(row["loss"], 6))
            paired.append(medians["overdrive"] / medians["accelerate"])
        med = {}
        for engine, values in times.items():
            med[engine] = statistics.median(values)
            p10 = statistics.quantiles(values, n=10)[0]
            per_step = statistics.mean(faults[engine])
            print(f"| {nprocs} | {engine} | {med[engine] * 1e3:.1f} | {p10 * 1e3:.1f} | "
                  f"{per_step:.0f} | {args.repeats} | {sorted(losses[engine])} |")  # fmt: skip
        ratio = med["overdrive"] / med["accelerate"]
        print(f"| {nprocs} | overdrive / Accelerate | **{ratio:.3f}x** | | | | |")
        low, high = paired_interval(paired)
        print(f"{nprocs} processes, paired ratio per repeat: median {statistics.median(paired):.3f}x, "
              f"95% interval {low:.3f}x to {high:.3f}x; each: "
              + " ".join(f"{r:.3f}" for r in paired))  # fmt: skip
        for engine, count in crashes.items():
            if count:
                print(f"{engine} on {nprocs}: {count} of {args.repeats} runs died after training")


if __name__ == "__main__":
    main()
