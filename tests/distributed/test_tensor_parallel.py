"""Tensor parallelism on CPU processes: the ordinary loop trains as one process would.

Each run of ``tp_checks.py`` also trains an unsplit copy on the whole global batch in every
process (the one-process reference), so one launch checks the loss trace, the clipped
global norm, the data each process read and ``gather_for_metrics``. Runs of 4 processes
carry the ``four_processes`` marker (``make parallel`` runs them alone).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("transformers")

SCRIPT = "tp_checks.py"
# Measured here: losses within 3e-7 of one process, norms within 2.5e-5 (TP also splits
# every matmul's sum over the tp ranks: 4x the noise of reordering the batch, 6e-6); resumed
# weights of one layout within 1.2e-7. A 1% gradient scale error moves the norms by 1e-2.
RTOL = 1e-4


def _arg(args: tuple[str, ...], name: str) -> int:
    return int(args[args.index(name) + 1])


def _run(
    nprocs: int,
    *args: str,
    launch_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> dict:
    result = run_launch(
        SCRIPT,
        nprocs=nprocs,
        args=list(args),
        launch_args=list(launch_args),
        env=env,
        timeout=420,
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    if "--reload" not in args:  # reduce counts each data-parallel rank once, not tp copies
        assert row["reduce_counts"] == _arg(args, "--global_batch") // _arg(args, "--batch")
    return row


def _assert_matches_one_process(row: dict, steps: int = 10, accum: int = 1) -> None:
    assert len(row["losses"]) == len(row["ref_losses"]) == steps
    assert len(row["norms"]) == len(row["ref_norms"]) == steps // accum
    for mine, ref in zip(row["losses"], row["ref_losses"], strict=True):
        assert math.isclose(mine, ref, rel_tol=RTOL), (row["losses"], row["ref_losses"])
    for mine, ref in zip(row["norms"], row["ref_norms"], strict=True):
        assert math.isclose(mine, ref, rel_tol=RTOL), (row["norms"], row["ref_norms"])
    assert row["same_batches"], "the processes of one tp group read different batches"
    assert row["gathered_exactly"], "gather_for_metrics did not return the dataset in order"


def _assert_resumes(directory: Path, row: dict, common: tuple[str, ...]) -> None:
    """The same launch resumed from the halfway state: the same losses, the same weights."""
    resumed = _run(2, *common, "--resume", str(directory))
    for mine, ref in zip(resumed["losses"], row["losses"][5:], strict=True):
        assert math.isclose(mine, ref, rel_tol=1e-6), (resumed["losses"], row["losses"])
    _assert_same_weights(directory)


def _assert_same_weights(directory: Path, other: str = "resumed") -> None:
    """``save_model`` of the uninterrupted and of the resumed run: the same full weights."""
    import torch
    from safetensors.torch import load_file

    final = load_file(str(directory / "final" / "model.safetensors"))
    again = load_file(str(directory / other / "model.safetensors"))
    assert sorted(final) == sorted(again) and "lm_head.weight" in final
    assert final["lm_head.weight"].shape == (128, 64)  # whole, not one process's half
    for name, tensor in final.items():
        torch.testing.assert_close(again[name], tensor, rtol=RTOL, atol=1e-6, msg=name)


TP2 = ("--tp", "2", "--batch", "4", "--global_batch", "4")


@pytest.fixture(scope="module")
def tp2_saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """(folder, row) of the uninterrupted TP=2 run that saves its halfway state and its
    final weights there: launched once for both resumes below."""
    folder = tmp_path_factory.mktemp("tp2")
    return folder, _run(2, *TP2, "--save", str(folder))


def _resume_from(saved: Path, tmp_path: Path) -> Path:
    """``tmp_path`` holding the saved halfway state and final weights (links), for a resume
    that writes its own results there."""
    for name in ("half", "final"):
        (tmp_path / name).symlink_to(saved / name)
    return tmp_path


@pytest.mark.distributed
def test_tp2_llama_with_its_own_plan_trains_as_one_process_and_resumes(
    tmp_path: Path, tp2_saved: tuple[Path, dict]
) -> None:
    saved, row = tp2_saved
    assert row["strategy"] == "tensor_parallel" and row["param_types"] == ["DTensor"]
    # One data-parallel process: FSDP has nothing to do and is not applied; the norms are
    # replicated DTensors, read as plain values only while their module runs.
    assert not row["fsdp_applied"] and row["attributes_are_parameters"]
    assert row["plan"]["lm_head"] == "colwise_rep"
    assert row["plan"]["model.layers.1.mlp.down_proj"] == "rowwise"
    assert row["coordinates"] == [[0, 0], [1, 0]]  # (tensor_parallel_rank, data_parallel_rank)
    _assert_matches_one_process(row)

    _assert_resumes(_resume_from(saved, tmp_path), row, TP2)


@pytest.mark.distributed
def test_tp2_checkpoint_resumes_under_fsdp_dp2(
    tmp_path: Path, tp2_saved: tuple[Path, dict]
) -> None:
    """TP=2 alone saves replicated norms on the tp mesh; FSDP2 FULL_SHARD on the same two
    processes (each now a data-parallel rank) loads that state and continues identically."""
    saved, whole = tp2_saved
    folder = str(_resume_from(saved, tmp_path))
    resumed = _run(2, "--fsdp", "--batch", "2", "--global_batch", "4", "--resume", folder)
    assert resumed["strategy"] == "fsdp" and resumed["fsdp_applied"]
    for mine, ref in zip(resumed["losses"], whole["losses"][5:], strict=True):
        assert math.isclose(mine, ref, rel_tol=RTOL), (resumed["losses"], whole["losses"])
    _assert_same_weights(tmp_path)


@pytest.mark.distributed
def test_megatron_recompute_and_backend_clipping_under_tp2() -> None:
    """recompute_activations runs each layer's forward again in backward; gradient_clipping
    clips by the global norm at the optimizer step (the loop only reads the norm): the
    losses stay those of one process clipping at 1.0 in its loop."""
    flags = (
        "--use_megatron_lm",
        "--megatron_lm_tp_degree",
        "2",
        "--megatron_lm_recompute_activations",
        "true",
        "--megatron_lm_gradient_clipping",
        "1.0",
    )
    args = ("--batch", "4", "--global_batch", "4", "--backend_clips")
    row = _run(2, *args, launch_args=flags)
    assert row["type"] == "MEGATRON_LM" and row["strategy"] == "tensor_parallel"
    assert row["probe_calls"] == 2 * 10  # forward and recomputation, 10 steps
    assert max(row["norms"]) > 1.0  # the unclipped norms: the backend's clipping mattered
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_megatron_distributed_optimizer_shards_optimizer_state_over_data_parallel() -> None:
    """use_distributed_optimizer without a tp degree: FSDP2 SHARD_GRAD_OP over the two
    data-parallel processes; each holds half the optimizer state; trains as one process."""
    flags = ("--use_megatron_lm", "--megatron_lm_use_distributed_optimizer", "true")
    row = _run(2, "--batch", "2", "--global_batch", "4", launch_args=flags)
    assert row["type"] == "MEGATRON_LM" and row["strategy"] == "fsdp" and row["fsdp_applied"]
    assert 0.45 < row["optimizer_fraction"] < 0.55, row["optimizer_fraction"]
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_tp2_from_an_empty_model_fills_from_the_main_process() -> None:
    """fsdp_cpu_ram_efficient_loading: the second process builds the model on the meta
    device; prepare splits it and fills its part from the main process's weights."""
    row = _run(2, "--tp", "2", "--fsdp", "--efficient", "--batch", "4", "--global_batch", "4")
    assert row["born_empty"] == [0.0, 1.0]
    assert row["strategy"] == "tensor_parallel" and not row["fsdp_applied"]
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_tied_embeddings_stay_whole_and_tied_and_train_as_one_process() -> None:
    row = _run(2, "--tp", "2", "--tied", "--batch", "4", "--global_batch", "4")
    assert "lm_head" not in row["plan"] and "model.embed_tokens" not in row["plan"]
    assert row["plan"]["model.layers.0.self_attn.o_proj"] == "rowwise"
    assert row["still_tied"]
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_plain_module_with_a_user_plan_accumulates_as_one_process() -> None:
    """2 micro-batches per optimizer step: the same as one process summing them."""
    row = _run(
        2, "--case", "mlp", "--tp", "2", "--batch", "4", "--global_batch", "4", "--accum", "2"
    )
    assert row["plan"] == {"0": "colwise", "2": "rowwise"}
    _assert_matches_one_process(row, accum=2)


def _assert_sequence_parallel_llama(row: dict, tied: bool = False) -> None:
    """The norms ran on half the sequence (8 tokens), between gathering blocks."""
    plan = row["plan"]
    for layer in (0, 1):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            assert plan[f"model.layers.{layer}.{norm}"] == "sequence_parallel"
        assert plan[f"model.layers.{layer}.mlp.down_proj"] == "rowwise_seq"
        assert plan[f"model.layers.{layer}.self_attn"] == "gather_input"
    assert plan["model.norm"] == "sequence_parallel"
    if tied:
        assert plan["model.embed_tokens"] == "shard_output" and row["still_tied"]
        assert plan["lm_head"] == "gather_input_local"
    else:
        assert plan["model.embed_tokens"] == "rowwise_rep_seq"
        assert plan["lm_head"] == "colwise_rep"
    assert len(row["norm_inputs"]) == 5
    for name, shape in row["norm_inputs"].items():
        assert shape[1:] == [4, 64], (name, shape)  # (batch, SEQ / 2, hidden)
    assert row["param_types"] == ["DTensor"]  # the optimizer sees one kind of tensor
    assert row["reports_sequence_parallel"]  # accelerator.parallelism_config says so


TP2_SP = ("--tp", "2", "--sp", "--batch", "4", "--global_batch", "4")


@pytest.mark.distributed
def test_tp2_sequence_parallel_llama_trains_as_one_process() -> None:
    """ParallelismConfig(tp_size=2, sequence_parallel=True); one data-parallel process."""
    row = _run(2, *TP2_SP)
    assert row["strategy"] == "tensor_parallel" and not row["fsdp_applied"]
    _assert_sequence_parallel_llama(row)
    _assert_matches_one_process(row)


# Sequence parallelism lays out activations only: the parameters, optimizer state and
# checkpoint are those of TP=2 alone, whose resume make test keeps (the tests above).
@pytest.mark.distributed
@pytest.mark.extended
def test_tp2_sequence_parallel_llama_resumes(tmp_path: Path) -> None:
    row = _run(2, *TP2_SP, "--save", str(tmp_path))
    _assert_sequence_parallel_llama(row)
    _assert_resumes(tmp_path, row, TP2_SP)


@pytest.mark.distributed
def test_megatron_sequence_parallelism_from_the_environment_with_tied_embeddings() -> None:
    flags = ("--use_megatron_lm", "--megatron_lm_tp_degree", "2")
    env = {"ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM": "true"}
    row = _run(2, "--tied", "--batch", "4", "--global_batch", "4", launch_args=flags, env=env)
    assert row["type"] == "MEGATRON_LM"
    _assert_sequence_parallel_llama(row, tied=True)
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_plain_module_with_a_sequence_parallel_layernorm_accumulates_as_one_process() -> None:
    """Linear colwise, rowwise, LayerNorm sequence_parallel, colwise, rowwise; 2 micro-batches
    per step, so the norm's partial gradients are reduced across an accumulation too."""
    row = _run(
        2, "--case", "sp_mlp", "--tp", "2", "--batch", "4", "--global_batch", "4", "--accum", "2"
    )
    assert row["plan"] == {
        "0": "colwise",
        "2": "rowwise_seq",
        "3": "sequence_parallel",
        "4": "colwise",
        "6": "rowwise_seq",
    }
    assert row["norm_inputs"] == {"3": [4, 4, 16]}  # half of the 8-long sequence
    _assert_matches_one_process(row, accum=2)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
def test_fsdp2_times_tp2_sequence_parallel_trains_as_one_process() -> None:
    row = _run(4, "--fsdp", "--tp", "2", "--sp", "--batch", "2", "--global_batch", "4")
    assert row["type"] == "FSDP" and row["fsdp_applied"]
    assert row["coordinates"] == [[0, 0], [1, 0], [0, 1], [1, 1]]
    norm_inputs = row["norm_inputs"]
    row["norm_inputs"] = {k: [4, *v[1:]] for k, v in norm_inputs.items()}  # batch 2 here
    _assert_sequence_parallel_llama(row)
    _assert_matches_one_process(row)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_megatron_tp2_times_two_replicas_trains_as_one_process() -> None:
    flags = ("--use_megatron_lm", "--megatron_lm_tp_degree", "2")
    row = _run(4, "--batch", "2", "--global_batch", "4", launch_args=flags)
    assert row["type"] == "MEGATRON_LM"
    assert row["coordinates"] == [[0, 0], [1, 0], [0, 1], [1, 1]]
    _assert_matches_one_process(row)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_megatron_tp2_with_the_distributed_optimizer_shards_over_data_parallel() -> None:
    flags = (
        "--use_megatron_lm",
        "--megatron_lm_tp_degree",
        "2",
        "--megatron_lm_use_distributed_optimizer",
        "true",
    )
    row = _run(4, "--batch", "2", "--global_batch", "4", launch_args=flags)
    assert row["strategy"] == "tensor_parallel" and row["fsdp_applied"]
    assert row["mesh"] == {"dp_shard": 2, "tp": 2}
    assert row["optimizer_fraction"] < 0.3, row["optimizer_fraction"]  # tp and dp split it
    _assert_matches_one_process(row)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_fsdp2_times_tp2_from_empty_models_fills_every_tp_group_from_the_main_process() -> None:
    """Three of four processes start empty, among them the whole second tp group (whose
    first process is not the main one): each is filled from the main process."""
    args = ("--tp", "2", "--fsdp", "--efficient", "--batch", "2", "--global_batch", "4")
    row = _run(4, *args)
    assert row["born_empty"] == [0.0, 1.0, 1.0, 1.0] and row["fsdp_applied"]
    _assert_matches_one_process(row)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_fsdp2_times_tp2_checkpoint_resumes_under_dp4_and_back(tmp_path: Path) -> None:
    """FSDP2 (dp_shard=2) x TP=2 trains as one process; its sharded state, saved halfway,
    resumes under FSDP FULL_SHARD on 4 processes to the same losses and parameters; the
    state that run saves at its end loads under FSDP2 x TP=2 again to the same weights."""
    common = ("--fsdp", "--global_batch", "4")
    whole = _run(4, "--tp", "2", "--batch", "2", "--save", str(tmp_path), *common)
    assert whole["type"] == "FSDP" and whole["strategy"] == "tensor_parallel"
    assert whole["fsdp_applied"]
    assert whole["coordinates"] == [[0, 0], [1, 0], [0, 1], [1, 1]]
    _assert_matches_one_process(whole)

    resumed = _run(4, "--batch", "1", "--resume", str(tmp_path), *common)
    assert resumed["strategy"] == "fsdp"
    assert resumed["gathered_exactly"]
    for mine, ref in zip(resumed["losses"], whole["losses"][5:], strict=True):
        assert math.isclose(mine, ref, rel_tol=RTOL), (resumed["losses"], whole["losses"])

    _assert_same_weights(tmp_path)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_hsdp_times_tp2_on_eight_processes_trains_as_one_process() -> None:
    """HYBRID_SHARD (2 replicas x 2 shards) x TP=2: a 3-D mesh of 8 processes."""
    row = _run(8, "--tp", "2", "--hybrid", "2", "--batch", "1", "--global_batch", "4")
    assert row["type"] == "FSDP" and row["fsdp_applied"]
    assert row["mesh"] == {"dp_replicate": 2, "dp_shard": 2, "tp": 2}
    # data_parallel_rank is the replica (as in Hugging Face Accelerate); the shard within it
    # and tp are inner dimensions
    assert [dp for _, dp in row["coordinates"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [tp for tp, _ in row["coordinates"]] == [0, 1] * 4
    _assert_matches_one_process(row)
