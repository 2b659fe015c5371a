"""Activation checkpointing of a transformers model whose config keeps a key/value cache:
without overdrive's hook the recomputed layers fill the cache a second time and the backward
fails (as under Hugging Face Accelerate's FSDP activation checkpointing, transformers issue
34928); with it, training forwards run without the cache and evaluation keeps it."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from overdrive.parallel.activation_checkpointing import (
    apply_activation_checkpointing,
    train_without_kv_cache,
)

transformers = pytest.importorskip("transformers")


def _checkpointed_llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    assert model.config.use_cache is True
    apply_activation_checkpointing(model.model.layers)
    return model


def _train_step(model: torch.nn.Module, **kwargs: object) -> None:
    ids = torch.randint(0, 64, (2, 16))
    model(input_ids=ids, labels=ids, **kwargs).loss.backward()


def test_without_the_hook_the_recomputed_layers_break_the_backward() -> None:
    with pytest.raises(RuntimeError, match="size|shape|Recomputed"):
        _train_step(_checkpointed_llama().train())


def test_with_it_training_runs_without_the_cache_and_evaluation_keeps_it() -> None:
    model = _checkpointed_llama().train()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert train_without_kv_cache(model) is True
        assert train_without_kv_cache(model) is False  # once however often prepared
    assert [str(w.message) for w in said if "use_cache=False" in str(w.message)]
    _train_step(model)
    assert all(p.grad is not None for p in model.parameters())
    with pytest.raises(RuntimeError, match="size|shape|Recomputed"):
        _train_step(model, use_cache=True)  # a call's own choice is kept
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        assert model.eval()(input_ids=ids).past_key_values is not None


def test_a_model_without_a_cache_is_left_alone() -> None:
    model = _checkpointed_llama()
    model.config.use_cache = False
    assert train_without_kv_cache(model) is False
    assert train_without_kv_cache(torch.nn.Linear(2, 2)) is False
