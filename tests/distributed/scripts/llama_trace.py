"""A tiny transformers LlamaForCausalLM (built from a config, no download) trained for a few
steps; prints the loss and the norm before clipping of every step as ``RESULT {json}`` on
the main process.

The backend (DDP or FSDP), precision and activation checkpointing come from launch flags, so
one script gives the traces tests/distributed/test_fsdp_llama.py compares.
"""

from __future__ import annotations

import json

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaConfig, LlamaForCausalLM

from overdrive.accelerator import Accelerator

STEPS, BATCH, SEQ, VOCAB = 8, 4, 16, 64


def build_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
    )
    return LlamaForCausalLM(config)


def main() -> None:
    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, VOCAB, (STEPS * BATCH * acc.num_processes, SEQ), generator=g)
    loader = DataLoader(TensorDataset(ids), batch_size=BATCH)
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses, norms = [], []
    for (batch,) in loader:
        loss = model(input_ids=batch, labels=batch).loss
        acc.backward(loss)
        norms.append(float(acc.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        opt.zero_grad()
        losses.append(acc.reduce(loss.detach().float(), "mean").item())
    if acc.is_main_process:
        result = {"rank": 0, "losses": losses, "norms": norms, "type": str(acc.distributed_type)}
        result["param_dtype"] = fsdp_param_dtype(acc, model)
        result["master_dtype"] = str(next(model.parameters()).dtype)
        result["scaler"] = type(acc.scaler).__name__ if acc.scaler is not None else None
        print("RESULT " + json.dumps(result))


def fsdp_param_dtype(acc: Accelerator, model: torch.nn.Module) -> str | None:
    """The dtype FSDP computes in (its mixed-precision policy), read off the wrapped model."""
    inner = acc.unwrap_model(model)
    if hasattr(inner, "_get_fsdp_state"):  # FSDP2
        return str(inner._get_fsdp_state()._mp_policy.param_dtype)
    policy = getattr(model, "mixed_precision", None)  # FSDP1
    return None if policy is None else str(policy.param_dtype)


if __name__ == "__main__":
    main()
