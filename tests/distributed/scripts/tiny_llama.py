"""The tiny transformers Llama the parallelism scripts train (built from a config, seeded)."""

from __future__ import annotations

import torch
from torch import nn


def tiny_llama(*, layers: int, vocab: int, seq: int, tied: bool = False) -> nn.Module:
    """Hidden 64, 4 heads, ``layers`` decoder layers; the same weights on every process."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=seq,
        tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(config)


def smallest_llama_config(*, vocab: int, seq: int) -> object:
    """The config of the simulation checks' Llama: hidden 32, 2 layers, 2 KV heads."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=seq,
    )
