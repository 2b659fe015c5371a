"""Sequence parallelism in one process: the layouts derived from a plan, and refusals
(the runs are distributed: tests/distributed/test_tensor_parallel.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from overdrive.arguments.plugins import ParallelismConfig
from overdrive.config import Settings, load_settings
from overdrive.errors import ConfigError
from overdrive.parallel.tp import TPSettings, layout_for
from overdrive.parallel.tp_plan import check_plan
from overdrive.parallel.tp_sequence import check_length
from overdrive.strategies import StrategyOptions, select_strategy
from tests.helpers.llama import small_llama

SP_KEY = "megatron_lm_config.sequence_parallelism"


def _tp(sequence_parallel: bool = True, plan: dict[str, str] | None = None) -> TPSettings:
    return TPSettings(
        2,
        "megatron_lm_config.tp_degree",
        "flag --megatron_lm_tp_degree",
        plan=plan,
        sequence_parallel=sequence_parallel,
        sp_key=SP_KEY,
        sp_source="env ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM",
    )


def _llama(tied: bool = False) -> nn.Module:
    return small_llama(2, tied=tied)


def test_sequence_parallel_is_a_plan_style() -> None:
    assert check_plan({"norm": "sequence_parallel"}, "plan") == {"norm": "sequence_parallel"}
    assert ParallelismConfig(tp_size=2, sequence_parallel=True).sequence_parallel


def test_a_llama_layout_runs_norms_on_slices_between_gathering_blocks() -> None:
    names = layout_for(_llama(), _tp())
    for layer in (0, 1):
        prefix = f"model.layers.{layer}"
        assert names[f"{prefix}.input_layernorm"] == "sequence_parallel"
        assert names[f"{prefix}.post_attention_layernorm"] == "sequence_parallel"
        assert names[f"{prefix}.self_attn"] == names[f"{prefix}.mlp"] == "gather_input"
        assert names[f"{prefix}.self_attn.o_proj"] == "rowwise_seq"  # reduce-scatter
        assert names[f"{prefix}.mlp.down_proj"] == "rowwise_seq"
        assert names[f"{prefix}.self_attn.q_proj"] == "colwise"
    assert names["model.norm"] == "sequence_parallel"
    assert names["model.embed_tokens"] == "rowwise_rep_seq"  # whole ids in, slices out
    assert names["lm_head"] == "colwise_rep"  # gathers its input, whole logits out
    assert "model.rotary_emb" not in names


def test_tied_embeddings_stay_whole_and_the_stream_is_split_after_them() -> None:
    names = layout_for(_llama(tied=True), _tp())
    assert names["model.embed_tokens"] == "shard_output"
    assert names["lm_head"] == "gather_input_local"
    assert names["model.norm"] == "sequence_parallel"


def test_without_sequence_parallelism_the_plan_is_unchanged() -> None:
    names = layout_for(_llama(), _tp(sequence_parallel=False))
    assert "sequence_parallel" not in names.values()
    assert names["model.layers.0.self_attn.o_proj"] == "rowwise"


def test_a_model_with_a_module_it_does_not_recognise_is_refused() -> None:
    model = _llama()
    model.model.adapter = nn.Linear(16, 16)  # on the residual stream, in no plan
    with pytest.raises(ConfigError) as info:
        layout_for(model, _tp())
    text = str(info.value)
    assert "model.adapter (Linear)" in text and SP_KEY in text
    assert "env ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM" in text
    assert "sequence_parallel entries" in text  # the fix: give the plan yourself


def test_a_plain_module_without_norms_or_blocks_is_refused() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    with pytest.raises(ConfigError, match="no block of colwise then rowwise"):
        layout_for(model, _tp(plan={"0": "colwise", "2": "rowwise"}))


def test_a_user_plan_with_sequence_parallel_entries_splits_rowwise_outputs() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4), nn.LayerNorm(4), nn.Linear(4, 8))
    plan = {"0": "colwise", "1": "rowwise", "2": "sequence_parallel", "3": "colwise"}
    names = layout_for(model, _tp(sequence_parallel=False, plan=plan))
    assert names == {"0": "colwise", "1": "rowwise_seq", "2": "sequence_parallel", "3": "colwise"}


def test_sequence_parallel_on_a_module_holding_weights_below_it_is_refused() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4), nn.Sequential(nn.LayerNorm(4)))
    plan = {"0": "colwise", "1": "rowwise", "2": "sequence_parallel"}
    with pytest.raises(ConfigError, match="holds submodules with weights"):
        layout_for(model, _tp(sequence_parallel=False, plan=plan))


def test_a_sequence_length_the_degree_does_not_divide_is_refused_at_the_forward() -> None:
    where = (SP_KEY, "env ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM")
    ids = torch.zeros(2, 7, dtype=torch.long)
    with pytest.raises(ConfigError) as info:
        check_length(2, where, "model.embed_tokens", nn.Embedding(4, 4), (ids,), {})
    text = str(info.value)
    assert "(2, 7)" in text and SP_KEY in text and "over 2 processes" in text
    check_length(2, where, "model.embed_tokens", nn.Embedding(4, 4), (ids[:, :6],), {})
    with pytest.raises(ConfigError, match="shape \\(2, 6\\)"):  # no sequence dim to split
        check_length(2, where, "fc", nn.Linear(6, 4), (torch.zeros(2, 6),), {})


def _state(settings: Settings, n: int = 2) -> object:
    from types import SimpleNamespace

    from overdrive.parallel.decide import decide_layout

    decision = decide_layout(settings, n)
    return SimpleNamespace(num_processes=n, device=torch.device("cpu"), decision=decision)


def test_megatron_sequence_parallelism_reaches_the_strategy_with_its_source() -> None:
    env = {"ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM": "true"}
    s = load_settings(
        code={"distributed_type": "MEGATRON_LM", "megatron_lm_config.tp_degree": 2}, environ=env
    )
    strategy = select_strategy(_state(s), s)
    tp = strategy.tp  # type: ignore[union-attr]
    assert tp.sequence_parallel and tp.sp_key == SP_KEY
    assert tp.sp_source == "env ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM"
    coded = select_strategy(_state(s), s, StrategyOptions(sequence_parallel=True))
    assert coded.tp.sp_source.startswith("ParallelismConfig(sequence_parallel")  # type: ignore[union-attr]


def test_sequence_parallelism_without_a_tensor_parallel_degree_warns() -> None:
    s = load_settings(code={"distributed_type": "MEGATRON_LM", SP_KEY: True}, environ={})
    with pytest.warns(UserWarning, match="sequence parallelism .* cannot take effect"):
        assert select_strategy(_state(s), s).name == "ddp"


def test_an_embedding_split_over_features_is_refused() -> None:
    model = _llama()
    plan = {"model.embed_tokens": "colwise", "model.layers.*.mlp.up_proj": "colwise"}
    plan["model.layers.*.mlp.down_proj"] = "rowwise"
    with pytest.raises(ConfigError, match="split over features, not the sequence"):
        layout_for(model, _tp(plan=plan))
