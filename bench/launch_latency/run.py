"""Launch latency: a 2-process script that only forms a gloo group, started by each launcher.

Rounds interleave the launchers (rotating their order) so machine noise hits all of them;
the report gives medians and ratios to torchrun. Run with the bench extra installed:

    .venv/bin/python bench/launch_latency/run.py --rounds 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "form_group.py"
BIN = Path(sys.executable).parent
COMPAT_SITE = HERE.parents[1] / ".compat" / "site"
PLAIN = "overdrive, no --cpu"


def launchers(nprocs: int) -> dict[str, list[str]]:
    n = str(nprocs)
    found = {
        "torchrun": [str(BIN / "torchrun"), "--nproc_per_node", n, str(SCRIPT)],
        "overdrive": [
            str(BIN / "overdrive"),
            "launch",
            "-q",
            "--cpu",
            "--num_processes",
            n,
            str(SCRIPT),
        ],
        # What a user types on a CPU machine: no --cpu, no CUDA_VISIBLE_DEVICES (the launcher
        # then has to find out that there is no GPU).
        PLAIN: [str(BIN / "overdrive"), "launch", "-q", "--num_processes", n, str(SCRIPT)],
        # Hugging Face Accelerate starts one process for `--cpu --num_processes 2` (which then
        # cannot form a group), so it is measured with --multi_gpu, its working CPU spelling.
        "accelerate": [
            str(BIN / "accelerate"),
            "launch",
            "--multi_gpu",
            "--num_processes",
            n,
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--num_machines",
            "1",
            str(SCRIPT),
        ],
    }
    if not shutil.which(found["accelerate"][0]) and (COMPAT_SITE / "accelerate").is_dir():
        # the test-only install `make compat-site` makes, run as a module from its folder
        module = [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
        found["accelerate"] = module + found["accelerate"][1:]
    return {name: cmd for name, cmd in found.items() if shutil.which(cmd[0])}


def _env(name: str, cmd: list[str]) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if name == PLAIN:
        del env["CUDA_VISIBLE_DEVICES"]
    if "accelerate.commands.accelerate_cli" in cmd:
        env["PYTHONPATH"] = str(COMPAT_SITE)
    return env


def time_once(name: str, cmd: list[str], nprocs: int) -> float:
    env = _env(name, cmd)
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - start
    joined = f"of {nprocs}"
    if result.returncode != 0 or result.stdout.count(joined) != nprocs:
        raise RuntimeError(f"{cmd[0]} failed:\n{result.stdout}\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--nprocs", type=int, default=2)
    args = parser.parse_args()
    cmds = launchers(args.nprocs)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    names = list(cmds)
    time_once(names[0], cmds[names[0]], args.nprocs)  # warm the file cache once, not counted
    for round_index in range(args.rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            times[name].append(time_once(name, cmds[name], args.nprocs))
    base = statistics.median(times["torchrun"])
    print(
        f"| launcher | median (s) | min (s) | ratio to torchrun |  ({args.rounds} rounds, {args.nprocs} processes)"
    )
    print("| --- | --- | --- | --- |")
    for name in names:
        med = statistics.median(times[name])
        print(f"| {name} | {med:.2f} | {min(times[name]):.2f} | {med / base:.3f} |")


if __name__ == "__main__":
    main()
