"""A save that runs out of room, for tests/faults/test_ckpt_disk_full.py (2 processes).

``--full`` names the ranks whose writes fail: they lower RLIMIT_FSIZE so that writing past
8 KiB into any file fails with a real EFBIG from the kernel (SIGXFSZ ignored), as a full
disk fails with ENOSPC. The model's tensor file and each rank's state file are larger.
Every rank records what save_state raised in ``<out>/error_<rank>.json``; then the limit
is lifted and a second save must succeed.

Under DDP the main process may save alone, and process 1 puts its state into the main
process's save wherever it arrives (``overdrive.checkpoint.save_alone``). ``--order`` fixes
where, with point-to-point messages rather than timing: ``joined`` (process 1 writes into
the save before the main process commits it: the main process's save-state hook waits for
process 1's) or ``late`` (process 1 calls save_state once the main process's returned).
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from overdrive import ProjectConfiguration
from overdrive.accelerator import Accelerator

LIMIT = 8192


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--full", required=True, help="comma-separated ranks whose disk is full")
    p.add_argument("--order", choices=["joined", "late"], required=True)
    args = p.parse_args()
    out = Path(args.out)
    project = ProjectConfiguration(
        project_dir=str(out / "project"), automatic_checkpoint_naming=True
    )
    acc = Accelerator(cpu=True, project_config=project)
    model = torch.nn.Linear(64, 64)  # 16 KiB of weights
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(8, 64)), batch_size=2)
    model, opt, data = acc.prepare(model, opt, data)
    rank = acc.process_index
    token = torch.zeros(1)

    def joined_before_the_commit(_models: Any, _weights: Any, _directory: str) -> None:
        # Runs inside save_state on both processes: on process 1 once it has joined the save.
        if rank == 1:
            dist.send(token, dst=0)
        else:
            dist.recv(token, src=1)

    joined = args.order == "joined"
    hook = acc.register_save_state_pre_hook(joined_before_the_commit) if joined else None

    full = rank in {int(r) for r in args.full.split(",") if r}
    if full:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))
    if not joined and rank == 1:
        dist.recv(token, src=0)
    try:
        acc.save_state()
        caught = None
    except Exception as exc:
        caught = {"type": type(exc).__name__, "message": str(exc)}
    if not joined and rank == 0:
        dist.send(token, dst=1)
    if full:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
    (out / f"error_{rank}.json").write_text(json.dumps(caught))
    if hook is not None:
        hook.remove()  # the second save needs no order
    acc.wait_for_everyone()
    saved = acc.save_state()  # room again: this one must succeed
    (out / f"saved_{rank}.json").write_text(json.dumps(str(saved)))


if __name__ == "__main__":
    main()
