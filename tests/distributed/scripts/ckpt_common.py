"""Shared by the checkpoint scripts: one small training setup and a loop that records
every batch it sees, so an uninterrupted run and a resumed one can be compared."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import DataLoaderConfiguration, ProjectConfiguration
from overdrive.accelerator import Accelerator
from overdrive.processes.random_state import set_seed

TOTAL_BATCHES = 15  # per process: 2.5 epochs of 6 batches
ACCUM = 2


class Progress:
    """A registered custom object: the loop's own position."""

    def __init__(self) -> None:
        self.batches = 0

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--mixed_precision", default="fp16")
    p.add_argument("--phase", default="full", choices=("full", "resume", "recover"))
    return p.parse_args()


def build(out: Path, mixed_precision: str) -> tuple[Any, ...]:
    set_seed(1234)
    accelerator = Accelerator(
        cpu=True,
        mixed_precision=mixed_precision,
        gradient_accumulation_steps=ACCUM,
        dataloader_config=DataLoaderConfiguration(exact_resume=True),  # overdrive's exact resume
        project_config=ProjectConfiguration(
            project_dir=str(out / "project"), automatic_checkpoint_naming=True, total_limit=2
        ),
    )
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
    x = torch.randn(24, 3)
    dataset = TensorDataset(x, x.sum(dim=1, keepdim=True), torch.arange(24))
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    return accelerator, model, optimizer, loader, scheduler, progress


def train(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    loader: Any,
    scheduler: Any,
    progress: Progress,
    *,
    until: int,
    save_at: tuple[int, ...] = (),
) -> list[list[int]]:
    """Train until ``progress.batches == until``; sample ids seen, per batch."""
    seen: list[list[int]] = []
    while progress.batches < until:
        for x, y, ids in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            progress.batches += 1
            seen.append(ids.tolist())
            if progress.batches in save_at:
                accelerator.save_state()
            if progress.batches == until:
                break
    return seen


def record(
    accelerator: Any, model: Any, optimizer: Any, scheduler: Any, seen: list[list[int]]
) -> dict[str, Any]:
    """What must match between runs, as a torch-loadable dict."""
    return {
        "params": {
            k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()
        },
        "optimizer": optimizer.optimizer.state_dict(),
        "scheduler": scheduler.scheduler.state_dict(),
        "precision": accelerator.precision.state_dict(),
        "seen": seen,
    }


def checkpoint_names(out: Path) -> list[str]:
    root = out / "project" / "checkpoints"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def dump(out: Path, name: str, data: Any) -> None:
    torch.save(data, out / name)


def dump_json(out: Path, name: str, data: Any) -> None:
    (out / name).write_text(json.dumps(data))
