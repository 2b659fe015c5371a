"""Interleaved per-step overhead benchmark: raw PyTorch, overdrive, accelerate, Fabric.

Starts ``worker.py`` on 2 CPU processes (torchrun, gloo) ``--repeats`` times; inside each,
the four implementations alternate in short blocks of timed steps (see worker.py). Reports,
per implementation, the median and 10th-percentile step time over all timed steps with
their ratios to raw PyTorch, and the ratio of each block's median to the raw block of the
same round (paired, so slow phases of a shared machine cancel out). ``raw_control`` is a
second, identical raw copy: its ratio is the noise floor of the comparison.

    .venv/bin/python bench/step_overhead/run.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env = {k: v for k, v in env.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    return env


def run_worker(args: argparse.Namespace, launch: int) -> dict[str, list[list[float]]]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(args.nprocs),
        "--master_port",
        str(_free_port()),
        str(HERE / "worker.py"),
        "--impls",
        args.impls,
        "--rounds",
        str(args.rounds),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--build_offset",
        str(launch),
    ]
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"worker failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith('{"blocks"'))
    return json.loads(line)["blocks"]  # type: ignore[no-any-return]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="separate worker launches")
    parser.add_argument("--rounds", type=int, default=100, help="rounds per launch")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per block")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--impls", default="raw,overdrive,accelerate,fabric,raw_control")
    args = parser.parse_args()
    names = args.impls.split(",")
    blocks: dict[str, list[list[float]]] = {name: [] for name in names}
    for r in range(args.repeats):
        got = run_worker(args, r)
        for name in names:
            blocks[name].extend(got[name])
        cells = "  ".join(
            f"{n}={statistics.median(t for b in got[n] for t in b) * 1e6:.0f}us" for n in names
        )
        print(f"launch {r + 1}/{args.repeats}: median step {cells}", flush=True)

    print(
        f"\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{args.nprocs} processes; {args.repeats} launches x {args.rounds} rounds x "
        f"{args.steps} timed steps per implementation (after {args.warmup} warm-up)\n"
    )
    print(
        "| implementation | median step (us) | ratio | p10 step (us) | ratio | "
        "paired block ratio: median [p25, p75] |"
    )
    print("|---|---|---|---|---|---|")
    steps = {n: [t for b in blocks[n] for t in b] for n in names}
    block_medians = {n: [statistics.median(b) for b in blocks[n]] for n in names}
    raw = "raw" in names
    for name in names:
        med, p10 = statistics.median(steps[name]), _quantile(steps[name], 0.1)
        if raw:
            r_med = f"{med / statistics.median(steps['raw']):.3f}x"
            r_p10 = f"{p10 / _quantile(steps['raw'], 0.1):.3f}x"
            paired = [b / a for a, b in zip(block_medians["raw"], block_medians[name])]
            spread = (
                f"{statistics.median(paired):.3f} "
                f"[{_quantile(paired, 0.25):.3f}, {_quantile(paired, 0.75):.3f}]"
            )
        else:
            r_med = r_p10 = spread = "-"
        print(f"| {name} | {med * 1e6:.1f} | {r_med} | {p10 * 1e6:.1f} | {r_p10} | {spread} |")


if __name__ == "__main__":
    main()
