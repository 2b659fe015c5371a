"""Checkpoint save speed against the disk's durable bandwidth, in one interleaved run.

Each round writes the checkpoint's byte count with ``dd conv=fdatasync`` (the disk's
durable bandwidth), buffered and with ``oflag=direct``, then times ``save_state`` of a model
with Adam state (``--gb`` of parameters) for each configuration: 1 process, 2 processes DDP, 2 processes FSDP2 with
sharded state dicts, and the asynchronous save (time until training may go on, and until
the checkpoint is complete). Reports medians and the ratio to dd.

    .venv/bin/python bench/checkpoint/run.py [--gb 1.2] [--rounds 3] [--dir /tmp/ckpt-bench]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launched import launch_result  # noqa: E402

CONFIGS = {
    "1 process": (1, []),
    "2 processes DDP": (2, []),
    "2 processes FSDP2 sharded": (
        2,
        ["--use_fsdp", "--fsdp_version", "2", "--fsdp_state_dict_type", "SHARDED_STATE_DICT"],
    ),
    "1 process, async_save": (1, ["ASYNC"]),
}


def dd_seconds(directory: Path, nbytes: int, *, direct: bool = False) -> float:
    target = directory / "dd.bin"
    count = max(1, nbytes // (16 << 20))
    flags = ["oflag=direct"] if direct else []
    done = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=16M", f"count={count}", "conv=fdatasync"]
        + flags,
        capture_output=True,
        text=True,
        check=True,
    )
    target.unlink()
    seconds = float(re.search(r"copied, ([0-9.]+) s", done.stderr).group(1))  # type: ignore[union-attr]
    return seconds * nbytes / (count * (16 << 20))


def save_runs(directory: Path, nprocs: int, flags: list[str], gb: float) -> dict:
    extra = ["--async_save"] if "ASYNC" in flags else []
    flags = [f for f in flags if f != "ASYNC"]
    worker = [str(HERE / "worker.py"), "--out", str(directory), "--gb", str(gb)]
    return launch_result(nprocs, flags, [*worker, "--repeats", "2", *extra])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gb", type=float, default=1.2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/tmp/ckpt-bench")
    args = p.parse_args()
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    dd: list[float] = []
    dd_direct: list[float] = []
    saves: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
    nbytes = 0
    for _ in range(args.rounds):
        for name, (nprocs, flags) in CONFIGS.items():
            out = save_runs(directory, nprocs, flags, args.gb)
            nbytes = out["bytes"][0]
            saves[name] += [(r, t) for r, t in out["times"]]
            dd.append(dd_seconds(directory, nbytes))
            dd_direct.append(dd_seconds(directory, nbytes, direct=True))
    shutil.rmtree(directory, ignore_errors=True)
    dd_med, direct_med = statistics.median(dd), statistics.median(dd_direct)
    print(
        f"checkpoint: {nbytes / 1e9:.2f} GB; dd conv=fdatasync median {dd_med:.2f} s "
        f"({nbytes / dd_med / 1e9:.2f} GB/s), with oflag=direct {direct_med:.2f} s "
        f"({nbytes / direct_med / 1e9:.2f} GB/s), over {len(dd)} runs each"
    )
    print(f"dd runs (s): {' '.join(f'{d:.1f}' for d in dd)}")
    print(f"dd direct runs (s): {' '.join(f'{d:.1f}' for d in dd_direct)}")
    for name, values in saves.items():
        print(f"{name} saves (s): {' '.join(f'{t:.1f}' for _, t in values)}")
    print(
        "| configuration | median save (s) | GB/s | vs dd | vs dd direct "
        "| median until training goes on (s) |"
    )
    print("|---|---|---|---|---|---|")
    for name, values in saves.items():
        total = statistics.median(t for _, t in values)
        returned = statistics.median(r for r, _ in values)
        print(
            f"| {name} | {total:.2f} | {nbytes / total / 1e9:.2f} | {dd_med / total:.2f} | "
            f"{direct_med / total:.2f} | {returned:.2f} |"
        )


if __name__ == "__main__":
    main()
