"""A tiny transformers Llama trained for 2 steps, then ``save_state`` into argv[1]. Run for
real by ``overdrive launch`` and, the same file, by ``overdrive launch --simulate``, which
stops it after the steps and measures what its ``save_state`` would write
(tests/distributed/test_simulate_checkpoint.py)."""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaConfig, LlamaForCausalLM

from overdrive.accelerator import Accelerator

STEPS, BATCH, SEQ, VOCAB = 2, 4, 16, 64


def main() -> None:
    acc = Accelerator(cpu=True)
    ids = torch.randint(0, VOCAB, (STEPS * BATCH * acc.num_processes, SEQ))
    loader = DataLoader(TensorDataset(ids), batch_size=BATCH)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
    )
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    for (batch,) in loader:
        acc.backward(model(input_ids=batch, labels=batch).loss)
        opt.step()
        sched.step()
        opt.zero_grad()
    acc.save_state(sys.argv[1])


if __name__ == "__main__":
    main()
