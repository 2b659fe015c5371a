"""DeepSpeed per-step overhead: raw ``deepspeed.initialize`` vs overdrive DEEPSPEED.

Starts ``worker.py`` on 2 CPU processes (torchrun, gloo, ``DS_ACCELERATOR=cpu``) once per
ZeRO stage; reports the median per-step time of each implementation's blocks and the median
of the paired per-round ratios overdrive / raw (target <= 1.02), and raw_control / raw (a
second raw copy: the noise floor of that ratio).

    .venv/bin/python bench/deepspeed_step/run.py --stages 2,3
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


def run_stage(stage: int, args: argparse.Namespace) -> dict[str, list[float]]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env = {k: v for k, v in env.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    env["DS_ACCELERATOR"] = "cpu"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(_free_port()), str(HERE / "worker.py"), "--stage", str(stage),
           "--rounds", str(args.rounds), "--steps", str(args.steps)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("TIMES ")), None)
    if done.returncode != 0 or line is None:
        sys.exit(f"stage {stage} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(line[len("TIMES ") :])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", default="2,3")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPU(s); 2 processes, gloo, CPU")
    print(f"rounds {args.rounds} x {args.steps} steps per implementation\n")
    print("| ZeRO stage | raw ms/step | overdrive ms/step | overdrive / raw | control / raw |")
    print("| --- | --- | --- | --- | --- |")
    for stage in (int(s) for s in args.stages.split(",")):
        times = run_stage(stage, args)
        raw, ours, control = times["raw"], times["overdrive"], times["raw_control"]
        ratio = statistics.median(o / r for o, r in zip(ours, raw))
        noise = statistics.median(c / r for c, r in zip(control, raw))
        print(f"| {stage} | {statistics.median(raw) * 1e3:.2f} | "
              f"{statistics.median(ours) * 1e3:.2f} | {ratio:.3f} | {noise:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
