"""A Llama-3-8B-shaped model (hidden 4096, 32 layers, vocabulary 128256; built from a config,
no weights) trained for a step on short sequences: only ever run by ``overdrive launch
--simulate`` (for real it would need about 128 GB for its fp32 weights, gradients and AdamW
state). ``--batch N``: samples per batch (default 1; a pipeline needs one per micro-batch)."""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaConfig, LlamaForCausalLM

from overdrive.accelerator import Accelerator

SEQ = 128


def main() -> None:
    batch_size = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 1
    acc = Accelerator()
    config = LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=8192,
    )
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, config.vocab_size, (4 * batch_size * acc.num_processes, SEQ))
    loader = DataLoader(TensorDataset(ids), batch_size=batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, opt, loader = acc.prepare(model, opt, loader)
    for (batch,) in loader:
        loss = model(input_ids=batch, labels=batch).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
