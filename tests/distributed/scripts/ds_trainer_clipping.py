"""transformers' Trainer under DeepSpeed with ``max_grad_norm``: one SGD step (lr 1), then what
the engine clipped by. Nothing here knows about overdrive.

Usage: ds_trainer_clipping.py OUTPUT_DIR CASE MAX_GRAD_NORM
CASE: ``file`` (DeepSpeed from the launch config file), ``json`` (TrainingArguments(deepspeed=)
with a JSON that has no gradient_clipping), ``auto`` (the JSON with ``"auto"``).
Prints ``RESULT {"rank": 0, "clip": ..., "norm": ..., "step": ...}``: the engine's gradient_clipping, the
gradient norm before clipping (Trainer's log) and the norm of the step taken (the clipped one).
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn
from transformers import Trainer, TrainingArguments


class Samples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(8, generator=g), "labels": 10 * torch.randn(1, generator=g)}


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.lin(x)
        return {"loss": ((out - labels) ** 2).mean(), "logits": out}


def main() -> None:
    output_dir, case, max_norm = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ds = None
    if case != "file":
        ds = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",
              "train_batch_size": "auto", "gradient_accumulation_steps": "auto"}  # fmt: skip
        if case == "auto":
            ds["gradient_clipping"] = "auto"
    torch.manual_seed(0)
    model = Model()
    before = [p.detach().clone() for p in model.parameters()]
    args = TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=4, max_steps=1, deepspeed=ds,
        max_grad_norm=max_norm, optim="sgd", learning_rate=1.0, lr_scheduler_type="constant",
        weight_decay=0.0, report_to=[], save_strategy="no", logging_steps=1,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=Samples())
    trainer.train()
    after = [p.detach().clone() for p in trainer.model.parameters()]
    step = torch.linalg.vector_norm(torch.cat([(a - b).flatten() for a, b in zip(after, before)]))
    norm = next(h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h)
    clip = trainer.model_wrapped.gradient_clipping()
    row = {"rank": args.process_index, "clip": clip, "norm": norm, "step": float(step)}
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
