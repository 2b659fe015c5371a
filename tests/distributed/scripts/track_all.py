"""Log through every installed tracker from 2 processes; only process 0 may write.

Process 1 logs different values, so anything it wrote would show up in the files.
Usage: track_all.py --out DIR --trackers jsonl,tensorboard,...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from overdrive.accelerator import Accelerator
from overdrive.tracking import NoOpTracker


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--trackers", required=True)
    args = p.parse_args()
    names = args.trackers.split(",")
    out = Path(args.out)
    acc = Accelerator(cpu=True, log_with=names, project_dir=str(out / "project"))
    acc.init_trackers(
        "demo",
        config={"lr": 0.01, "layers": [4, 2], "optimizer": {"name": "adamw"}},
        init_kwargs={"wandb": {"mode": "offline"}} if "wandb" in names else {},
    )
    offset = 0.0 if acc.is_main_process else 100.0
    for step in range(5):
        acc.log({"loss": torch.tensor(offset + 0.5 * step), "lr": 0.01 / (step + 1)}, step=step)
    found = {}
    for name in names:
        tracker = acc.get_tracker(name)
        run = acc.get_tracker(name, unwrap=True)
        if not acc.is_main_process:
            run.anything("is", accepted=True)  # a no-op run takes any call
        found[name] = {"noop": isinstance(tracker, NoOpTracker), "run": type(run).__name__}
    (out / f"trackers_{acc.process_index}.json").write_text(json.dumps(found))
    acc.end_training()


if __name__ == "__main__":
    main()
