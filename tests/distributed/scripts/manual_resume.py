"""Uninterrupted run, and an automatic resume (load_state alone, with overdrive's
exact_resume), each rank writing the sample ids it saw to ``--out``; a resume that also skips
by hand (skip_first_batches) is refused on every rank."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import Accelerator, DataLoaderConfiguration, set_seed
from overdrive.errors import ConfigError

EPOCHS, BATCHES, SAVE_AT = 3, 4, 6  # 16 samples, 2 per rank on 2 ranks: 4 batches an epoch


def setup() -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    set_seed(7)
    acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(exact_resume=True))
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(16, 3), torch.arange(16))
    return acc, *acc.prepare(model, opt, DataLoader(data, batch_size=2, shuffle=True))


def epochs(folder: Path, mode: str) -> list[list[int]]:
    acc, model, opt, loader = setup()
    start, resume_step = 0, 0
    if mode != "full":
        acc.load_state(str(folder))
        start, resume_step = divmod(SAVE_AT, BATCHES)
    seen: list[list[int]] = []
    for epoch in range(start, EPOCHS):
        active = loader
        if mode == "by_hand" and epoch == start and resume_step:
            active = acc.skip_first_batches(loader, resume_step)
        for x, ids in active:
            acc.backward(model(x).sum())
            opt.step()
            opt.zero_grad()
            seen.append(ids.tolist())
            if mode == "full" and len(seen) == SAVE_AT:
                acc.save_state(str(folder))
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    seen: dict[str, object] = {mode: epochs(out / "ckpt", mode) for mode in ("full", "auto")}
    try:
        epochs(out / "ckpt", "by_hand")
    except ConfigError as refusal:
        seen["by_hand"] = refusal.key
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    (out / f"seen-{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
