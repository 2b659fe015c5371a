"""Save, or time ``load_state`` of, a large model with Adam state; print the result.

Run under ``overdrive launch`` (see run.py); the backend comes from the launch flags.
``--phase save`` writes ``--ckpt`` once; ``--phase load`` prepares the same model, takes one
optimizer step (so the state it loads into exists, as mid-training), then times
``load_state`` ``--repeats`` times (the first, which pays one-time costs, is not reported).
Memory per load, each over its level just before the load: the kernel's peak resident size
(``VmHWM``, reset through ``/proc/self/clear_refs``: it counts the pages of the memory-mapped
checkpoint files read too) and the peak of the process's own memory (``RssAnon``, sampled by
``peak_rss.py`` from another process).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from overdrive import Accelerator
from overdrive.utils import gather_object

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from adam_model import prepared_adam_model  # noqa: E402


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def timed_load(acc: Accelerator, ckpt: str) -> dict[str, float]:
    watcher = subprocess.Popen(
        [sys.executable, str(HERE / "peak_rss.py"), str(os.getpid())],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout is not None and watcher.stdout.readline().strip() == "ready"
    acc.wait_for_everyone()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the kernel's peak resident size (VmHWM) starts again from now
    anon, resident = _status("RssAnon"), _status("VmRSS")
    start = time.perf_counter()
    acc.load_state(ckpt)
    seconds = time.perf_counter() - start
    hwm = _status("VmHWM")
    watcher.send_signal(signal.SIGTERM)
    peak, _ = (int(x) for x in watcher.communicate()[0].split())
    return {"seconds": seconds, "anon": max(0, peak - anon), "resident": max(0, hwm - resident)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--phase", choices=("save", "load"), required=True)
    p.add_argument("--gb", type=float, default=0.4, help="model parameters, in GB (fp32)")
    p.add_argument("--repeats", type=int, default=4)
    args = p.parse_args()
    acc = Accelerator(cpu=True)
    prepared_adam_model(acc, args.gb)
    if args.phase == "save":
        acc.save_state(args.ckpt)
        acc.print("RESULT " + json.dumps({"world": acc.num_processes}), flush=True)
        return
    runs = [timed_load(acc, args.ckpt) for _ in range(args.repeats)]
    everyone = gather_object([runs])
    if acc.is_main_process:
        out = {
            "world": acc.num_processes,
            "type": str(acc.distributed_type),
            "seconds": [max(r[i]["seconds"] for r in everyone) for i in range(1, args.repeats)],
            # the first load of a launch pays one-time costs (imports, first collectives)
            "anon": max(run["anon"] for r in everyone for run in r[1:]),
            "resident": max(run["resident"] for r in everyone for run in r[1:]),
        }
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
