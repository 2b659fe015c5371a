"""Train with whatever FSDP configuration the launch gives (tests/distributed/configs/fsdp*.yaml), save a
checkpoint, and print what ran as ``RESULT {json}`` on the main process."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_checks import make_model  # noqa: E402

from overdrive.accelerator import Accelerator  # noqa: E402


def main() -> None:
    acc = Accelerator(cpu=True)
    with acc.cpu_ram_efficient_init():
        model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(64, 5, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses = []
    for _ in range(3):
        for xb, yb in loader:
            with acc.accumulate(model):
                loss = F.mse_loss(model(xb).float(), yb)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
            losses.append(acc.reduce(loss.detach(), "mean").item())
    with tempfile.TemporaryDirectory() as tmp:
        saved = acc.save_state(Path(tmp) / "ckpt") if acc.is_main_process else None
        if not acc.is_main_process:
            acc.save_state(Path(tmp) / "ckpt")  # collective: every process writes its part
        files = sorted(p.name for p in saved.iterdir()) if saved else []
    if acc.is_main_process:
        strategy = acc.strategy
        row = {
            "rank": 0,
            "type": str(acc.distributed_type),
            "version": strategy.policy.version,
            "units": strategy.units[id(model)],
            "mixed_precision": acc.mixed_precision,
            "accumulation": acc.gradient_accumulation_steps,
            "sharded": any(".rank1." in f for f in files),
            "first": sum(losses[:4]) / 4,
            "last": sum(losses[-4:]) / 4,
        }
        print("RESULT " + json.dumps(row))


if __name__ == "__main__":
    main()
