"""Exact resume with every RNG stream in use, for tests/faults/test_ckpt_rng_resume.py.

The model has Dropout (global torch RNG per rank, seeded differently on each rank), the
dataset adds random noise to every sample it returns (drawn in the DataLoader workers when
``--workers`` > 0, else from the main process's torch RNG), and the training step draws from
python's and numpy's RNGs too. The order is shuffled, or (``--weighted``) drawn by a
WeightedRandomSampler from torch's RNG whenever an epoch starts. Gradient accumulation 2; the save happens after batch 9,
mid-epoch and inside an accumulation window.

full:   train 15 batches uninterrupted, save after batch 9.
resume: fresh processes: load that checkpoint, train to 15.

Each rank writes ``<out>/<phase>_<rank>.json``: a digest of what must match (parameters, optimizer
state, every RNG stream's final state, the loader generator) plus the per-batch losses and
sample ids seen after the save.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

from overdrive import DataLoaderConfiguration
from overdrive.accelerator import Accelerator
from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.processes.random_state import set_seed

TOTAL, SAVE_AT, ACCUM = 15, 9, 2  # per process: 2.5 epochs of 6 batches


class NoisyData(Dataset):
    """Sample i: fixed features plus fresh noise from whichever process reads it."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        noisy = self.x[i] + 0.1 * torch.rand(4) + 0.01 * float(np.random.rand())
        return noisy, self.x[i].sum(0, keepdim=True), i


class Steps:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = int(state["n"])


def digest(*objs: Any) -> str:
    h = hashlib.sha256()
    for obj in objs:
        if isinstance(obj, torch.Tensor):
            h.update(obj.detach().reshape(-1).numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                h.update(str(k).encode())
                h.update(digest(obj[k]).encode())
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                h.update(digest(v).encode())
        elif isinstance(obj, np.ndarray):
            h.update(obj.tobytes())
        else:
            h.update(repr(obj).encode())
    return h.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="the checkpoint and the result files go here")
    p.add_argument("--phase", choices=("full", "resume"), required=True)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--generator", action="store_true", help="give the DataLoader a generator")
    p.add_argument(
        "--weighted", action="store_true", help="a WeightedRandomSampler instead of shuffle"
    )
    p.add_argument("--rng_types", default="")
    p.add_argument("--find_unused", action="store_true", help="DDP find_unused_parameters")
    args = p.parse_args()
    out = Path(args.out)

    set_seed(1234, device_specific=True)  # every rank has its own streams
    rng_types = [t for t in args.rng_types.split(",") if t]
    # With 3+ processes DDP's first synchronised step after a resume reduces in its initial
    # bucket layout, not the rebuilt one, and a 3-term sum depends on the order: a last-bit
    # difference that is not about RNG streams (docs/guarantees_checkpoints.md). DDP never
    # rebuilds its buckets with find_unused_parameters=True.
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)]
    acc = Accelerator(
        cpu=True,
        gradient_accumulation_steps=ACCUM,
        dataloader_config=DataLoaderConfiguration(exact_resume=True),  # overdrive's exact resume
        rng_types=rng_types or None,
        kwargs_handlers=handlers if args.find_unused else None,
    )
    world = acc.num_processes
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 32), torch.nn.Dropout(0.3), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(77) if args.generator else None
    data = NoisyData(12 * world)
    if args.weighted:  # draws each epoch's order from torch's RNG as it is iterated
        order: dict[str, Any] = {"sampler": WeightedRandomSampler(torch.ones(len(data)), len(data))}
    else:
        order = {"shuffle": True}
    loader = DataLoader(data, batch_size=2, num_workers=args.workers, generator=gen, **order)
    model, opt, loader = acc.prepare(model, opt, loader)
    steps = Steps()
    acc.register_for_checkpointing(steps)
    if args.phase == "resume":
        acc.load_state(str(out / "ckpt"))

    losses: list[float] = []
    seen: list[list[int]] = []
    while steps.n < TOTAL:
        for x, y, ids in loader:
            with acc.accumulate(model):
                noise = random.random() + float(np.random.rand())  # python and numpy streams
                loss = torch.nn.functional.mse_loss(model(x), y) * (1 + 1e-3 * noise)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
            steps.n += 1
            if steps.n > SAVE_AT:
                losses.append(loss.item())
                seen.append(ids.tolist())
            if steps.n == SAVE_AT and args.phase == "full":
                acc.save_state(str(out / "ckpt"))
            if steps.n == TOTAL:
                break

    params = acc.unwrap_model(model).state_dict()
    streams = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=True),
        "generator": gen.get_state() if gen is not None else None,
    }
    row = {
        "rank": acc.process_index,
        "model": digest(params),
        "optimizer": digest(opt.optimizer.state_dict()["state"]),
        "rng": {k: digest(v) for k, v in streams.items()},
        "losses": losses,
        "seen": seen,
    }
    (out / f"{args.phase}_{acc.process_index}.json").write_text(json.dumps(row))


if __name__ == "__main__":
    main()
