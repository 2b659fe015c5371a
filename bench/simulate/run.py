"""The simulation's own cost: wall time and peak resident memory of ``overdrive launch
--simulate`` (one rank, one optimizer step) against the simulated world size and against
the model's size, for Llama-3-shaped models built from a config (``llama.py``, no weights)
under FSDP2 x TP.

    .venv/bin/python bench/simulate/run.py [--worlds 128,1024,4096,16384] [--shape 8b]
        [--shapes 8b,70b --shapes_world 1024] [--tp 8] [--json FILE]

Each point is one ``overdrive launch --simulate --simulate_ranks 0 --simulate_steps 1``
command with 8 processes per machine (``--num_machines world/8``), timed from start to exit;
its peak RSS is the largest of the command's processes (the launcher and the simulated rank,
from ``wait4``). The table also gives the simulated rank's own seconds (from its report) and
the parameter bytes it holds after the step: the model held by one rank.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OVERDRIVE = [sys.executable, "-m", "overdrive.cli.main"]
PER_MACHINE = 8


def command(world: int, shape: str, tp: int, report: str) -> list[str]:
    """The launch of one point: rank 0 of ``world`` processes, FSDP2 (x TP when tp > 1)."""
    machines = max(1, world // PER_MACHINE)
    flags = ["--simulate", "--simulate_ranks", "0", "--simulate_steps", "1"]
    flags += ["--simulate_json", report, "--cpu", "--num_machines", str(machines)]
    flags += ["--num_processes", str(world)]
    if machines > 1:
        flags += ["--main_process_ip", "10.0.0.1"]
    flags += ["--use_fsdp", "--fsdp_version", "2"]
    flags += ["--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]
    if tp > 1:
        flags += ["--parallelism_config_tp_size", str(tp)]
    return [*OVERDRIVE, "launch", *flags, str(HERE / "llama.py"), "--shape", shape]


class _Waited(subprocess.Popen):
    """``Popen`` that keeps the child's resource usage (``wait4``: the child and the
    processes it waited for)."""

    usage = None

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        pid, status, usage = os.wait4(self.pid, wait_flags)
        if pid == self.pid:
            self.usage = usage
        return pid, status


def measure(world: int, shape: str, tp: int) -> dict:
    """One point: the command's wall seconds and peak RSS, the rank's seconds and bytes."""
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as folder:
        report = os.path.join(folder, "report.json")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        started = time.monotonic()
        process = _Waited(
            command(world, shape, tp, report),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, stderr = process.communicate()
        wall = time.monotonic() - started
        rss_kib = process.usage.ru_maxrss if process.usage else 0
        if process.returncode != 0:
            sys.exit(f"world {world} shape {shape} failed:\n{stderr.decode()[-3000:]}")
        (rank,) = json.loads(Path(report).read_text())["ranks"]
    return {
        "world": world,
        "shape": shape,
        "tp": tp,
        "wall_s": round(wall, 1),
        "rank_s": rank["seconds"],
        "peak_rss_mib": round(rss_kib / 1024),
        "held_param_bytes": rank["state_bytes"]["parameters"],
    }


def row(point: dict) -> str:
    held = point["held_param_bytes"] / 2**20
    return (
        f"| {point['world']} | {point['shape']} | dp_shard={point['world'] // point['tp']} "
        f"x tp={point['tp']} | {held:.2f} | {point['wall_s']} | {point['rank_s']} "
        f"| {point['peak_rss_mib']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", default="128,1024,4096,16384")
    parser.add_argument("--shape", default="8b", help="the model of the world sweep")
    parser.add_argument("--shapes", default="70b", help="more models, at --shapes_world")
    parser.add_argument("--shapes_world", type=int, default=1024)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--json", help="also write the points as JSON to this file")
    args = parser.parse_args()
    plan = [(int(w), args.shape) for w in args.worlds.split(",") if w]
    plan += [(args.shapes_world, s) for s in args.shapes.split(",") if s]
    print("| simulated processes | model | layout | parameters held by the rank, MiB "
          "| command wall s | simulated rank s | peak RSS MiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    points = []
    for world, shape in plan:
        points.append(measure(world, shape, args.tp))
        print(row(points[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(points, indent=2))


if __name__ == "__main__":
    main()
