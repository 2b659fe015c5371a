"""A plain transformers Trainer script (tiny Llama, generated tokens); writes its loss trace as JSON.

Usage: trainer_tiny.py OUT_JSON [per_device_batch] [construct_only]
"""

from __future__ import annotations

import json
import sys
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    """Deterministic random token sequences (labels = inputs)."""

    def __init__(self, n: int = 64, length: int = 16) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 128, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    out = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    construct_only = len(sys.argv) > 3 and sys.argv[3] == "construct_only"
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=128,
        max_position_embeddings=32,
    )
    model = LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            max_steps=6,
            per_device_train_batch_size=batch,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            logging_steps=1,
            seed=0,
            data_seed=0,
            dataloader_drop_last=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens())
        result: dict[str, object] = {"constructed": True, "world": args.world_size}
        if not construct_only:
            trainer.train()
            result["losses"] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
            result["weight_sum"] = float(sum(p.detach().double().sum() for p in model.parameters()))
    if args.process_index == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
