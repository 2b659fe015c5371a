"""Time ``save_state`` of a large model with Adam state; print bytes written and seconds.

Run under ``overdrive launch`` (see run.py); the backend comes from the launch flags.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from overdrive import Accelerator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adam_model import prepared_adam_model  # noqa: E402


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--gb", type=float, default=1.2, help="model parameters, in GB (fp32)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--async_save", action="store_true")
    args = p.parse_args()
    acc = Accelerator(cpu=True)
    prepared_adam_model(acc, args.gb)
    times, sizes = [], []
    for i in range(args.repeats):
        target = Path(args.out) / f"ckpt_{i}"
        acc.wait_for_everyone()
        start = time.perf_counter()
        pending = acc.save_state(str(target), async_save=args.async_save)
        returned = time.perf_counter() - start  # when training could go on
        if args.async_save:
            pending.result()
        acc.wait_for_everyone()
        times.append((returned, time.perf_counter() - start))
        if acc.is_main_process:
            sizes.append(dir_bytes(target))
            shutil.rmtree(target)
        acc.wait_for_everyone()
    if acc.is_main_process:
        out = {"world": acc.num_processes, "type": str(acc.distributed_type), "times": times}
        out["bytes"] = sizes
        print("RESULT " + json.dumps(out), flush=True)
    os.sync()


if __name__ == "__main__":
    main()
