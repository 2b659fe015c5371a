"""A Llama trained for 3 steps, run for real on a CUDA GPU and, the same file, by
``overdrive launch --simulate --simulate_device cuda`` (tests/gpu/test_simulate_gpu.py).

Run for real, it prints ``REAL {json}``: the caching allocator's peaks before the first
forward (``setup_*``) and since (``steps_*``), the cache emptied and the peaks reset at the
first forward, as the simulation's report counts them (docs/simulate.md, "Memory sized for a
GPU"). Arguments: the attention implementation (``eager`` or ``sdpa``), then the shape:
hidden size, layers, batch, sequence length."""

from __future__ import annotations

import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from overdrive import Accelerator

STEPS, VOCAB = 3, 32000


def main() -> None:
    attention = sys.argv[1]
    hidden, layers, batch, seq = (int(a) for a in sys.argv[2:6])
    acc = Accelerator()
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 128,
        num_key_value_heads=hidden // 128,
        max_position_embeddings=seq,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, opt = acc.prepare(model, opt)
    on_cuda = acc.device.type == "cuda"
    real: dict[str, int] = {}
    for step in range(STEPS):
        ids = torch.randint(0, VOCAB, (batch, seq), device=acc.device)
        if step == 0 and on_cuda:
            torch.cuda.synchronize()
            real["setup_allocated"] = torch.cuda.max_memory_allocated()
            real["setup_reserved"] = torch.cuda.max_memory_reserved()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        acc.backward(model(input_ids=ids, labels=ids).loss)
        opt.step()
        opt.zero_grad()
    if on_cuda:
        torch.cuda.synchronize()
        real["steps_allocated"] = torch.cuda.max_memory_allocated()
        real["steps_reserved"] = torch.cuda.max_memory_reserved()
        print("REAL " + json.dumps(real), flush=True)


if __name__ == "__main__":
    main()
