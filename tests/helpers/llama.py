"""A small transformers Llama built from a config, for unit tests (no download)."""

from __future__ import annotations

import pytest
from torch import nn


def small_llama(layers: int = 2, *, tied: bool = False) -> nn.Module:
    """Vocabulary 32, hidden 16, 2 heads, ``layers`` decoder layers; skips without
    transformers."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    return transformers.LlamaForCausalLM(config)
