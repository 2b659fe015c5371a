"""One of two jobs saving into one project_dir at once, for test_ckpt_concurrent_jobs.py.

Both jobs are plain one-process runs with automatic checkpoint naming. Their first saves
are made to collide: job "a" stops after writing its files, just before committing, until
job "b" has chosen its target and written its model files (for the same number, since "a"
has not committed yet); then both go on. After that each job saves ``--saves`` more times
as fast as it can. Each save stores the job's name and the save's index in a registered
object; the job writes the paths save_state reported to ``<sync>/reported_<job>.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

import overdrive.checkpoint.save as save_module
from overdrive import ProjectConfiguration
from overdrive.accelerator import Accelerator

DEADLINE_S = 60


class Tag:
    def __init__(self, job: str) -> None:
        self.job, self.index = job, -1

    def state_dict(self) -> dict[str, Any]:
        return {"job": self.job, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.job, self.index = state["job"], state["index"]


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {DEADLINE_S}s")
        time.sleep(0.01)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--project", required=True)
    p.add_argument("--sync", required=True)
    p.add_argument("--job", choices=("a", "b"), required=True)
    p.add_argument("--saves", type=int, default=10)
    args = p.parse_args()
    sync = Path(args.sync)
    config = ProjectConfiguration(project_dir=args.project, automatic_checkpoint_naming=True)
    acc = Accelerator(cpu=True, project_config=config)
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    tag = Tag(args.job)
    acc.register_for_checkpointing(tag)

    def collide(stage: str) -> None:
        if args.job == "a" and stage == "wrote rank files":
            (sync / "a_written").touch()
            wait_for(sync / "b_staged")
        if args.job == "b" and stage == "writing rank files":
            (sync / "b_staged").touch()

    if args.job == "b":
        wait_for(sync / "a_written")
    reported = []
    for index in range(1 + args.saves):
        save_module._fault_point = collide if index == 0 else (lambda stage: None)
        tag.index = index
        reported.append([index, str(acc.save_state())])
    (sync / f"reported_{args.job}.json").write_text(json.dumps(reported))


if __name__ == "__main__":
    main()
