"""A fuller training loop: settings in code, gradient accumulation, split batches, a prepared
LR scheduler, logging and saving the model. A small text classifier built from code, on random
token ids, stands in for a downloaded model, so the script runs anywhere in seconds:

    overdrive launch --num_processes 2 examples/text_classifier.py
    python examples/text_classifier.py

The model goes to ``--output_dir`` (default ``outputs/text_classifier``, which git ignores).

Notes for a loop ported from Hugging Face Accelerate:

* no ``num_processes`` in code: a process count in code must match the launch
  (``overdrive launch --num_processes 4 ...``), otherwise overdrive stops with an error.
* gradient accumulation uses ``accelerator.accumulate(model)``; ``accelerator.backward``
  already divides the loss by ``gradient_accumulation_steps``, so a manual ``loss / steps``
  and ``batch_idx % steps`` bookkeeping would divide twice.
* the scheduler is prepared too, so it advances once per optimizer step that really ran.
* batches are split with ``DataLoaderConfiguration(split_batches=True)``: the ``Accelerator``
  argument of the same name is accepted and ignored, as in Hugging Face Accelerate.
* ``mixed_precision`` defaults to ``no`` here so the script runs on any CPU; pass
  ``--mixed_precision bf16`` to train in bf16.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from overdrive import Accelerator, DataLoaderConfiguration

VOCAB, SEQ_LEN, CLASSES = 1000, 16, 2


@dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor


class TinyClassifier(nn.Module):
    """Embedding bag + linear head; returns ``.loss`` like a transformers model."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64, padding_idx=0)
        self.head = nn.Linear(64, CLASSES)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> Output:
        mask = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.head(pooled)
        return Output(nn.functional.cross_entropy(logits, labels), logits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixed_precision", default=None)
    parser.add_argument("--output_dir", default=os.path.join("outputs", "text_classifier"))
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    accelerator_config = {
        "mixed_precision": args.mixed_precision,
        "gradient_accumulation_steps": 2,
        # each global batch of 8 is split across the processes
        "dataloader_config": DataLoaderConfiguration(split_batches=True),
        "logging_dir": os.path.join(args.output_dir, "logs"),
    }
    accelerator = Accelerator(**accelerator_config)
    process_index = accelerator.process_index
    accelerator.print(f"[{process_index}] device {accelerator.device}")
    accelerator.print(f"[{process_index}] {accelerator.num_processes} processes")
    accelerator.print(f"[{process_index}] mixed precision: {accelerator.mixed_precision}")
    accelerator.print(f"[{process_index}] accumulation: {accelerator.gradient_accumulation_steps}")

    torch.manual_seed(0)
    n = 200
    input_ids = torch.randint(1, VOCAB, (n, SEQ_LEN))
    attention_mask = torch.ones(n, SEQ_LEN, dtype=torch.long)
    labels = (input_ids[:, 0] % 2).long()  # learnable: the parity of the first token
    dataset = TensorDataset(input_ids, attention_mask, labels)
    dataloader = DataLoader(dataset, batch_size=8)

    model = TinyClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-2)
    lr_scheduler = torch.optim.lr_scheduler.LinearLR(optimizer)
    model, optimizer, dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, dataloader, lr_scheduler
    )

    model.train()
    for epoch in range(args.epochs):
        for batch_idx, (ids, mask, y) in enumerate(dataloader):
            with accelerator.accumulate(model):
                outputs = model(input_ids=ids, attention_mask=mask, labels=y)
                loss = outputs.loss
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if batch_idx % 10 == 0:
                accelerator.print(f"epoch {epoch}, batch {batch_idx}: loss {loss.item():.4f}")
            accelerator.log({"loss": loss.item()}, step=epoch * len(dataloader) + batch_idx)
        accelerator.print(f"epoch {epoch} finished")

    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
    accelerator.save_model(model, args.output_dir)
    accelerator.print(f"model saved to {args.output_dir}")


if __name__ == "__main__":
    main()
