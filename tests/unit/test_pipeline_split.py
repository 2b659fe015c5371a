"""Pipeline parallelism in one process: which layers go to which stage, and the refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from overdrive.config import load_settings
from overdrive.errors import ConfigError
from overdrive.parallel.layout import layout_from_settings
from overdrive.parallel.pipeline import split_model, stage_bounds
from overdrive.preflight.backends import check_available
from tests.helpers.llama import small_llama


def _settings(**code: object):
    return load_settings(code=code, environ={})


def _llama(tied: bool = False) -> nn.Module:
    return small_llama(5, tied=tied)


def test_layers_are_spread_evenly_earlier_stages_taking_the_rest() -> None:
    assert stage_bounds(4, 2) == [(0, 2), (2, 4)]
    assert stage_bounds(5, 2) == [(0, 3), (3, 5)]
    assert stage_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert stage_bounds(3, 3) == [(0, 1), (1, 2), (2, 3)]


def test_split_points_choose_where_stages_start() -> None:
    assert stage_bounds(6, 3, [1, 5]) == [(0, 1), (1, 5), (5, 6)]
    for bad in ([0, 3], [3, 3], [2], [2, 6]):
        with pytest.raises(ConfigError, match="split points"):
            stage_bounds(6, 3, bad)


def test_a_sequential_keeps_its_stage_children_under_their_own_names() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 4), nn.Linear(4, 2))
    stage = split_model(model, 1, 2)
    assert stage.layers == (2, 4) and stage.is_last and not stage.is_first
    assert sorted(stage.names.values()) == ["2.bias", "2.weight", "3.bias", "3.weight"]
    assert [type(m) for m in stage.module] == [nn.Linear, nn.Linear]
    assert stage.loss_fn is None  # a plain module's loss comes from code


def test_a_llama_keeps_the_embedding_first_and_norm_and_head_last() -> None:
    first = _llama()
    stage0 = split_model(first, 0, 2)
    assert stage0.layers == (0, 3) and len(first.model.layers) == 3
    assert first.lm_head is None and isinstance(first.model.norm, nn.Identity)
    assert "model.embed_tokens.weight" in stage0.names.values()
    assert "model.layers.2.self_attn.q_proj.weight" in stage0.names.values()

    last = _llama()
    stage1 = split_model(last, 1, 2)
    assert stage1.layers == (3, 5) and last.model.embed_tokens is None
    names = set(stage1.names.values())
    assert {"lm_head.weight", "model.norm.weight"} <= names
    # the kept layers answer to their names in the whole model, not 0 and 1
    assert "model.layers.3.mlp.up_proj.weight" in names
    assert not any(n.startswith(("model.layers.0.", "model.layers.2.")) for n in names)
    assert stage1.loss_fn is not None


def test_refusals_at_prepare_name_the_degree() -> None:
    with pytest.raises(ConfigError, match="larger than the 2 repeated layers"):
        split_model(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), 0, 3)
    with pytest.raises(ConfigError, match="cannot split a Linear"):
        split_model(nn.Linear(2, 2), 0, 2)
    with pytest.raises(ConfigError, match="tie_word_embeddings"):
        split_model(_llama(tied=True), 0, 2)


def test_refusals_name_the_degree_setting_the_pipeline_came_from() -> None:
    """A pipeline from ``ParallelismConfig(pp_size=...)`` is refused naming that setting, not
    ``megatron_lm_config.pp_degree``."""
    key = "parallelism_config.parallelism_config_pp_size"
    with pytest.raises(ConfigError) as info:
        split_model(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), 0, 3, key=key)
    assert info.value.key == key and f"set {key} to at most 2" in str(info.value)
    with pytest.raises(ConfigError) as info:
        split_model(_llama(tied=True), 0, 2, key=key)
    assert info.value.key == key and "megatron" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        split_model(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), 0, 2, [5], key=key)
    assert info.value.key == key


def _pp(**extra: object):
    micro = {"megatron_lm_config.num_micro_batches": 2}
    return _settings(
        distributed_type="MEGATRON_LM", **{"megatron_lm_config.pp_degree": 2, **micro, **extra}
    )


def test_pipeline_degree_leaves_the_rest_to_replicas_pp_outermost() -> None:
    s = _pp()
    check_available(s)
    layout = layout_from_settings(s, 4)
    assert (layout.pp, layout.dp_replicate, layout.dp_shard, layout.tp) == (2, 2, 1, 1)
    assert [layout.dp_rank(r) for r in range(4)] == [0, 1, 0, 1]
    assert layout.data_ranks() == [0, 1]  # the first stage's processes read the data


def test_a_world_the_pipeline_does_not_divide_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        layout_from_settings(_pp(), 3)
    assert info.value.key == "megatron_lm_config.pp_degree"
    assert "does not divide the 3 processes" in str(info.value)


def test_pipeline_with_tensor_parallelism_puts_tp_innermost() -> None:
    layout = layout_from_settings(_pp(**{"megatron_lm_config.tp_degree": 2}), 4)
    assert (layout.pp, layout.dp_replicate, layout.dp_shard, layout.tp) == (2, 1, 1, 2)
    assert [layout.coordinates(r)["pp"] for r in range(4)] == [0, 0, 1, 1]
    assert layout.data_ranks() == [0]  # one data-parallel rank: every process reads it


def test_a_parallelism_config_pipeline_shards_the_rest_under_fsdp2() -> None:
    from overdrive.parallel.layout import pp_micro_batches

    sizes = {
        "parallelism_config.parallelism_config_pp_size": 2,
        "parallelism_config.parallelism_config_dp_shard_size": 2,
    }
    s = _settings(distributed_type="FSDP", **{"fsdp_config.fsdp_version": 2, **sizes})
    layout = layout_from_settings(s, 4)
    assert (layout.pp, layout.dp_replicate, layout.dp_shard, layout.tp) == (2, 1, 2, 1)
    assert pp_micro_batches(s) == 2  # as many as stages when not set, so 1F1B can run
    with pytest.raises(ConfigError) as info:
        layout_from_settings(_settings(distributed_type="FSDP", **sizes), 4)  # fsdp_version 1
    assert info.value.key == "fsdp_config.fsdp_version" and "fsdp_version 2" in str(info.value)
    assert "parallelism_config.parallelism_config_pp_size = 2" in str(info.value)
    deepspeed = _settings(distributed_type="DEEPSPEED", **sizes)
    with pytest.raises(ConfigError, match="DeepSpeed's own pipeline"):
        layout_from_settings(deepspeed, 4)


def test_micro_batches_without_a_pipeline_are_refused() -> None:
    s = _settings(distributed_type="MEGATRON_LM", **{"megatron_lm_config.num_micro_batches": 4})
    with pytest.raises(ConfigError, match="there is no pipeline"):
        layout_from_settings(s, 2)


def test_pipeline_degree_outside_megatron_lm_takes_no_processes() -> None:
    layout = layout_from_settings(_settings(**{"megatron_lm_config.pp_degree": 2}), 2)
    assert layout.pp == 1 and layout.dp_replicate == 2


@pytest.mark.parametrize(
    ("key", "value", "fix"),
    [
        ("megatron_lm_config.use_distributed_optimizer", True, "turn it off"),
        ("mixed_precision", "fp16", "bf16"),
        ("dynamo_config.dynamo_backend", "eager", "dynamo_backend to no"),
    ],
)
def test_what_the_schedule_cannot_do_yet_is_refused_by_name(
    key: str, value: object, fix: str
) -> None:
    import torch

    from overdrive.parallel.decide import decide_layout
    from overdrive.preflight.launch import plan_launch
    from overdrive.strategies import select_strategy

    with pytest.raises(ConfigError) as info:  # a worker's PartialState decides its layout
        decide_layout(_pp(**{key: value}), 2)
    assert info.value.key == key and fix in str(info.value)
    # what a worker refuses, the launcher and `config validate` refuse before it starts
    launch = {"num_processes": 2, "use_cpu": True, key: value}
    with pytest.raises(ConfigError) as before:
        plan_launch(_pp(**launch), "train.py", warn=lambda _: None)
    assert str(before.value) == str(info.value)
    gpipe = _pp(**{"megatron_lm_config.pipeline_schedule": "gpipe"})
    state = SimpleNamespace(
        num_processes=2, device=torch.device("cpu"), decision=decide_layout(gpipe, 2)
    )
    strategy = select_strategy(state, gpipe)
    assert strategy.name == "pipeline_parallel" and strategy.pp.schedule == "GPipe"  # type: ignore[attr-defined]


def test_1f1b_with_fewer_micro_batches_than_stages_is_refused_before_workers_start() -> None:
    few = {"megatron_lm_config.num_micro_batches": 1}
    with pytest.raises(ConfigError) as info:
        layout_from_settings(_pp(**few), 2)
    assert info.value.key == "megatron_lm_config.num_micro_batches" and "GPipe" in str(info.value)
    gpipe = layout_from_settings(_pp(**few, **{"megatron_lm_config.pipeline_schedule": "GPipe"}), 2)
    assert gpipe.pp == 2


def test_an_optimizer_over_named_parameters_keeps_the_names_of_its_stage() -> None:
    """Dropping another stage's parameters drops their names too: the names an optimizer
    built from named_parameters() saves must stay those of the parameters it steps."""
    import torch

    from overdrive.parallel.layout import ParallelLayout
    from overdrive.parallel.topology import Topology
    from overdrive.strategies.pipeline import PipelineParallelStrategy, PPSettings

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    optimizer = torch.optim.AdamW(model.named_parameters())
    strategy = PipelineParallelStrategy(
        torch.device("cpu"), Topology(ParallelLayout(pp=2), "cpu"), PPSettings(2, 2, "1F1B")
    )
    strategy._dropped = {id(p) for p in model[0].parameters()}
    strategy._keep_stage_params(optimizer)
    (group,) = optimizer.param_groups
    assert group["params"] == list(model[1].parameters())
    assert group["param_names"] == ["1.weight", "1.bias"]


def test_config_validate_refuses_a_pipeline_with_fp16_before_any_worker(tmp_path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "pp.yaml"
    cfg.write_text(
        "distributed_type: MEGATRON_LM\nnum_processes: 2\nuse_cpu: true\n"
        "mixed_precision: fp16\nmegatron_lm_config:\n  pp_degree: 2\n"
        "  num_micro_batches: 2\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", "config", "validate", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "mixed_precision = fp16" in done.stderr and "use bf16" in done.stderr
    assert "Traceback" not in done.stderr
