"""A programmatic-configuration training loop (``Accelerator(...)`` configured in code,
accumulation by hand, as in Hugging Face Accelerate docs, Getting started > Quicktour and
Reference > Accelerator), written against Hugging Face Accelerate's API (``accelerate``);
tests/compat ports it by renaming imports and runs both.

Choices that keep it small and offline, none of which touch the loop: a tiny BERT built
from a config (dropout on) instead of a download, generated token data, a linear warmup
schedule sized from the unprepared loader, CPU, and one JSON line per batch (loss, learning
rate, step).

    python programmatic_loop.py OUT_DIR {argument,config,none}

argument: ``Accelerator(split_batches=True)``, the argument on the Accelerator itself;
config:   ``DataLoaderConfiguration(split_batches=True)``;
none:     batches not split (each process reads its own batch of 8).
"""

import json
import os
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

EPOCHS, BATCH, ACCUMULATION = 3, 8, 2


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    if mode == "argument":
        split = {"split_batches": True}
    else:
        split = {"dataloader_config": DataLoaderConfiguration(split_batches=mode == "config")}
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION, cpu=True, **split)
    set_seed(42)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 100, (200, 16), generator=g)
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(0, 2, (200,), generator=g)
    dataset = TensorDataset(input_ids, attention_mask, labels)
    dataloader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    total = EPOCHS * len(dataloader) // ACCUMULATION  # sized from the unprepared loader
    lr_scheduler = get_linear_schedule_with_warmup(optimizer, total // 10, total)
    model, optimizer, dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, dataloader, lr_scheduler
    )
    rows = []
    model.train()
    for epoch in range(EPOCHS):
        for batch_idx, batch in enumerate(dataloader):
            ids, mask, y = batch
            outputs = model(input_ids=ids, attention_mask=mask, labels=y)
            loss = outputs.loss
            accelerator.backward(loss / accelerator.gradient_accumulation_steps)
            if (batch_idx + 1) % accelerator.gradient_accumulation_steps == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            rows.append(
                {
                    "epoch": epoch,
                    "batch": batch_idx,
                    "loss": loss.item(),
                    "lr": lr_scheduler.get_last_lr()[0],
                    "first_id": int(ids[0, 0]),
                }
            )
    weight = accelerator.unwrap_model(model).classifier.weight
    rows.append({"classifier_sum": float(weight.detach().sum())})
    path = os.path.join(out, f"rank{accelerator.process_index}.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
