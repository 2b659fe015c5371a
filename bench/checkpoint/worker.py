"""Time ``save_state`` of a large model with Adam state; print bytes written and seconds.

Run under ``overdrive launch`` (see run.py); the backend comes from the launch flags.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import torch
from torch import nn

from overdrive import Accelerator


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
    width = 4096
    layers = max(1, round(args.gb * 1e9 / (4 * width * width)))
    with acc.cpu_ram_efficient_init():
        model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model, opt = acc.prepare(model, opt)
    for p_ in model.parameters():  # optimizer state without a costly forward
        p_.grad = torch.zeros_like(p_)
    opt.step()
    opt.zero_grad()
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
