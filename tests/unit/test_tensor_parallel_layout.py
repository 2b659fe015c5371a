"""Tensor parallelism in one process: degrees, refusals, plans (the runs are distributed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from torch import nn

from overdrive.arguments.plugins import ParallelismConfig
from overdrive.cli.main import main
from overdrive.config import load_settings
from overdrive.errors import ConfigError
from overdrive.parallel.layout import layout_from_settings, tp_setting
from overdrive.parallel.tp import TPSettings, check_heads, plan_for
from overdrive.parallel.tp_plan import check_plan, model_plan, resolve
from overdrive.preflight.backends import check_available


def _settings(environ: dict[str, str] | None = None, **code: object):
    return load_settings(code=code, environ=environ or {})


def test_megatron_tp_degree_leaves_the_rest_to_replicas() -> None:
    s = _settings(distributed_type="MEGATRON_LM", **{"megatron_lm_config.tp_degree": 2})
    layout = layout_from_settings(s, 4)
    assert (layout.dp_replicate, layout.dp_shard, layout.tp) == (2, 1, 2)
    assert layout.mesh_dims() == (("dp_replicate", "dp_shard", "tp"), (2, 1, 2))
    # tp innermost: ranks 0,1 are one tp group (dp rank 0), 2,3 the other (dp rank 1)
    assert [layout.dp_rank(r) for r in range(4)] == [0, 0, 1, 1]
    assert layout.data_ranks() == [0, 2]


def test_fsdp_with_tp_size_shards_over_the_rest() -> None:
    s = _settings(
        distributed_type="FSDP",
        **{"parallelism_config.parallelism_config_tp_size": 2, "fsdp_config.fsdp_version": 2},
    )
    layout = layout_from_settings(s, 8)
    assert (layout.dp_replicate, layout.dp_shard, layout.tp, layout.dp_size) == (1, 4, 2, 4)
    assert layout.describe() == "dp_shard=4 x tp=2"


def test_parallelism_config_in_code_sets_the_degree() -> None:
    code = ParallelismConfig(tp_size=2, tp_plan={"0": "colwise"}).to_settings()
    assert code == {"parallelism_config.parallelism_config_tp_size": 2}
    assert tp_setting(_settings(**code)) == (2, "parallelism_config.parallelism_config_tp_size")


def test_megatron_degree_counts_only_under_megatron() -> None:
    s = _settings(**{"megatron_lm_config.tp_degree": 2})
    assert tp_setting(s)[0] == 1


def test_a_world_the_degree_does_not_divide_names_setting_source_and_fix() -> None:
    s = _settings(
        environ={"ACCELERATE_MEGATRON_LM_TP_DEGREE": "2", "ACCELERATE_USE_MEGATRON_LM": "true"}
    )
    with pytest.raises(ConfigError) as info:
        layout_from_settings(s, 3)
    text = str(info.value)
    assert "tensor-parallel degree 2" in text and "3 processes" in text
    assert "env ACCELERATE_MEGATRON_LM_TP_DEGREE" in text and "fix:" in text


def test_two_different_degrees_are_refused() -> None:
    s = _settings(
        distributed_type="MEGATRON_LM",
        **{
            "megatron_lm_config.tp_degree": 2,
            "parallelism_config.parallelism_config_tp_size": 4,
        },
    )
    with pytest.raises(ConfigError, match="given twice"):
        tp_setting(s)


@pytest.mark.parametrize("backend", ["DEEPSPEED", "FSDP1"])
def test_backends_tp_does_not_compose_with_are_refused(backend: str) -> None:
    extra: dict[str, object] = {"parallelism_config.parallelism_config_tp_size": 2}
    if backend == "FSDP1":
        extra["fsdp_config.fsdp_version"] = 1
    s = _settings(distributed_type=backend.rstrip("1"), **extra)
    with pytest.raises(ConfigError, match="cannot run under"):
        layout_from_settings(s, 4)


@pytest.mark.parametrize(
    "key",
    [
        "megatron_lm_config.sequence_parallelism",
        "megatron_lm_config.use_distributed_optimizer",
        "megatron_lm_config.recompute_activations",
    ],
)
def test_every_megatron_switch_is_available(key: str) -> None:
    check_available(_settings(distributed_type="MEGATRON_LM", **{key: True}))


def test_sequence_parallelism_is_still_refused() -> None:
    described = ParallelismConfig(sp_size=2)  # describing a mesh with it is fine
    assert described._get_mesh() == (("sp",), (2,))
    with pytest.raises(ConfigError, match="sp_size"):
        described.to_settings()  # what Accelerator(parallelism_config=...) reads


def test_plans_are_checked_when_given() -> None:
    with pytest.raises(ConfigError, match="not a tensor-parallel style"):
        ParallelismConfig(tp_size=2, tp_plan={"fc": "diagonal"})
    assert check_plan({"a": "colwise_gather_output", "b": "embedding_rowwise"}, "x") == {
        "a": "colwise_rep",
        "b": "rowwise_rep",
    }


def test_patterns_resolve_to_modules_and_a_pattern_that_names_none_is_refused() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    assert resolve(model, {"0": "colwise", "2.*": "rowwise"}, "plan") == {
        "0": "colwise",
        "2.0": "rowwise",
    }
    with pytest.raises(ConfigError, match="'fc1' names no module"):
        resolve(model, {"fc1": "colwise"}, "plan")


def test_a_model_without_a_plan_needs_one() -> None:
    tp = TPSettings(2, "parallelism_config.parallelism_config_tp_size", "flag --x")
    with pytest.raises(ConfigError, match="carries none"):
        plan_for(nn.Linear(2, 2), tp)


def test_heads_the_degree_does_not_divide_are_named() -> None:
    model = SimpleNamespace(config=SimpleNamespace(num_attention_heads=6, num_key_value_heads=3))
    tp = TPSettings(2, "megatron_lm_config.tp_degree", "flag --megatron_lm_tp_degree")
    with pytest.raises(ConfigError) as info:
        check_heads(model, tp)  # type: ignore[arg-type]
    text = str(info.value)
    assert "num_key_value_heads (3)" in text and "megatron_lm_config.tp_degree" in text


def test_a_transformers_llama_brings_its_own_plan_and_tied_weights_stay_whole() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config)
    own = model_plan(model)
    assert own is not None and own["lm_head"] == "colwise_gather_output"
    tp = TPSettings(2, "parallelism_config.parallelism_config_tp_size", "code")
    plan = plan_for(model, tp)
    assert plan["model.layers.0.mlp.down_proj"] == "rowwise"
    assert "lm_head" not in plan and "model.embed_tokens" not in plan  # tied: not split


def test_launch_refuses_a_world_the_degree_does_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit('a worker started')\n")
    flags = ["--use_megatron_lm", "--megatron_lm_tp_degree", "2"]
    code = main(["launch", "--cpu", "--num_processes", "3", *flags, str(script)])
    err = capsys.readouterr().err
    assert code == 2
    assert "tensor-parallel degree 2" in err and "3 processes" in err
    assert "flag --megatron_lm_tp_degree" in err
    assert "Traceback" not in err and "a worker started" not in err


def test_dry_run_shows_which_rank_holds_which_coordinate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    flags = ["--use_fsdp", "--fsdp_version", "2", "--parallelism_config_tp_size", "2"]
    code = main(["launch", "--cpu", "--num_processes", "4", *flags, "--dry_run", str(script)])
    out = capsys.readouterr().out
    assert code == 0
    assert "mesh (dp_shard=2 x tp=2; data-parallel degree 2" in out
    assert "rank 1: dp_shard 0, tp 1  (reads data-parallel share 0)" in out
    assert "rank 2: dp_shard 1, tp 0  (reads data-parallel share 1)" in out


def test_megatron_lm_mixed_precision_is_autocast_not_handed_to_an_engine() -> None:
    import torch

    from overdrive.precision import make_precision
    from overdrive.precision.autocast import AutocastPrecision
    from overdrive.strategies.deepspeed import DeepSpeedStrategy
    from overdrive.strategies.tensor_parallel import TensorParallelStrategy

    assert TensorParallelStrategy.precision_owner is None
    assert DeepSpeedStrategy.precision_owner == "DeepSpeed"
    owner = TensorParallelStrategy.precision_owner
    precision = make_precision("bf16", torch.device("cpu"), precision_owner=owner)
    assert isinstance(precision, AutocastPrecision)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_the_global_norm_and_clipping_match_torch_on_plain_tensors(norm_type: float) -> None:
    import torch

    from overdrive.parallel.grad_norm import clip_grad_norm

    torch.manual_seed(0)
    ours, theirs = nn.Linear(5, 3), nn.Linear(5, 3)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(4, 5)
    for model in (ours, theirs):
        model(x).pow(2).sum().backward()
    norm = clip_grad_norm(list(ours.parameters()), 0.5, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.5, norm_type=norm_type)
    torch.testing.assert_close(norm, expected)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)


def test_hybrid_shard_times_tp_is_a_three_dimensional_mesh() -> None:
    s = _settings(
        distributed_type="FSDP",
        **{
            "fsdp_config.fsdp_version": 2,
            "fsdp_config.fsdp_sharding_strategy": "HYBRID_SHARD",
            "parallelism_config.parallelism_config_dp_shard_size": 2,
            "parallelism_config.parallelism_config_tp_size": 2,
        },
    )
    layout = layout_from_settings(s, 8)
    assert layout.mesh_dims() == (("dp_replicate", "dp_shard", "tp"), (2, 2, 2))
    # tp innermost, then the shard groups, replicas outermost
    assert [layout.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert layout.coordinates(5) == {"pp": 0, "dp_replicate": 1, "dp_shard": 0, "cp": 0, "tp": 1}
    assert layout.data_ranks() == [0, 2, 4, 6]


def test_distributed_optimizer_shards_the_data_parallel_processes() -> None:
    megatron = {"distributed_type": "MEGATRON_LM", "megatron_lm_config.tp_degree": 2}
    replicas = layout_from_settings(_settings(**megatron), 8)
    assert (replicas.dp_replicate, replicas.dp_shard, replicas.tp) == (4, 1, 2)
    s = _settings(**megatron, **{"megatron_lm_config.use_distributed_optimizer": True})
    sharded = layout_from_settings(s, 8)
    assert (sharded.dp_replicate, sharded.dp_shard, sharded.tp) == (1, 4, 2)
    assert [sharded.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_the_mesh_is_named_and_read_from_the_environment_as_hugging_face_accelerate_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hsdp_tp = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, tp_size=2)
    assert hsdp_tp._get_mesh() == (("dp_replicate", "dp_shard", "tp"), (2, 2, 2))
    assert hsdp_tp.dp_dim_names == ("dp_replicate", "dp_shard")
    assert hsdp_tp.dp_shard_cp_dim_names == ("dp_shard",) and hsdp_tp.total_size == 8
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "4")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "2")
    from_env = ParallelismConfig(dp_shard_size=1)  # a size given in code wins
    assert (from_env.tp_size, from_env.dp_shard_size) == (4, 1)
