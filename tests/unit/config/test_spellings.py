"""Both spellings Hugging Face Accelerate's docs use for one setting resolve to the same canonical value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import resolve_layers, write_yaml


@pytest.mark.parametrize(
    ("data", "key", "expected"),
    [
        (
            {"fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_LAYER"}},
            "fsdp_config.fsdp_auto_wrap_policy",
            "TRANSFORMER_BASED_WRAP",
        ),
        (
            {"fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}},
            "fsdp_config.fsdp_auto_wrap_policy",
            "TRANSFORMER_BASED_WRAP",
        ),
        (
            {"fsdp_config": {"fsdp_auto_wrap_policy": "SIZE_BASED"}},
            "fsdp_config.fsdp_auto_wrap_policy",
            "SIZE_BASED_WRAP",
        ),
        ({"fsdp_config": {"fsdp_cpu_offload": True}}, "fsdp_config.fsdp_offload_params", True),
        ({"fsdp_config": {"fsdp_offload_params": True}}, "fsdp_config.fsdp_offload_params", True),
        (
            {"fsdp_config": {"sharding_strategy": 2}},
            "fsdp_config.fsdp_sharding_strategy",
            "SHARD_GRAD_OP",
        ),
        (
            {"fsdp_config": {"fsdp_sharding_strategy": "full_shard"}},
            "fsdp_config.fsdp_sharding_strategy",
            "FULL_SHARD",
        ),
        (
            {"fsdp_config": {"transformer_layer_cls_to_wrap": "BertLayer, BertEmbeddings"}},
            "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
            ["BertLayer", "BertEmbeddings"],
        ),
        (
            {"fsdp_config": {"reshard_after_forward": "no"}},
            "fsdp_config.fsdp_reshard_after_forward",
            False,
        ),
        ({"megatron_lm_config": {"megatron_lm_tp_degree": 2}}, "megatron_lm_config.tp_degree", 2),
        ({"distributed_type": "TPU"}, "distributed_type", "XLA"),
        ({"distributed_type": "multi_gpu"}, "distributed_type", "MULTI_GPU"),
        ({"compute_environment": "AWS"}, "compute_environment", "AMAZON_SAGEMAKER"),
        ({"dynamo_backend": "INDUCTOR"}, "dynamo_config.dynamo_backend", "inductor"),
        ({"cpu": "yes"}, "use_cpu", True),
        ({"gpu_ids": [0, 1, 3]}, "gpu_ids", "0,1,3"),
        ({"gpu_ids": "0, 1"}, "gpu_ids", "0,1"),
        ({"log_with": ["tensorboard", "jsonl"]}, "log_with", ["tensorboard", "jsonl"]),
    ],
)
def test_spellings_normalise(tmp_path: Path, data: dict, key: str, expected: Any) -> None:
    settings = resolve_layers(file=write_yaml(tmp_path / "cfg.yaml", data))
    assert settings[key] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("yes", True),
        ("no", False),
        ("true", True),
        ("false", False),
        ("1", True),
        ("0", False),
        ("'yes'", True),
        ("'no'", False),
        ("True", True),
        ("OFF", False),
    ],
)
def test_boolean_words(tmp_path: Path, text: str, expected: bool) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(f"downcast_bf16: {text}\n")
    assert resolve_layers(file=path)["downcast_bf16"] is expected


@pytest.mark.parametrize("text", ["no", "'no'", "false"])
def test_yaml_no_is_the_precision_word_no(tmp_path: Path, text: str) -> None:
    """YAML 1.1 turns a bare `no` into False; for mixed_precision it means the word "no"."""
    path = tmp_path / "cfg.yaml"
    path.write_text(f"mixed_precision: {text}\n")
    assert resolve_layers(file=path)["mixed_precision"] == "no"


@pytest.mark.parametrize("word", ["yes", "no", "true", "false", "1", "0", "TRUE", "No"])
def test_boolean_words_from_env(word: str) -> None:
    settings = resolve_layers(env={"ACCELERATE_USE_CPU": word})
    assert settings["use_cpu"] is (word.lower() in ("yes", "true", "1"))
