"""Pipeline parallelism on CPU processes: the ordinary loop trains as one process would.

Each run of ``pp_checks.py`` also trains an unsplit copy on the whole global batches in the
main process (the one-process reference), so one launch checks the loss trace, the clipped
global norm, an eval pass, the stage split and the data each process read.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("transformers")

SCRIPT = "pp_checks.py"
RTOL = 1e-4
NORM_RTOL = 1e-3  # the norms after 10 AdamW steps drift a little more than the losses
PP2 = ("--use_megatron_lm", "--megatron_lm_pp_degree", "2", "--megatron_lm_num_micro_batches", "2")


def _run(nprocs: int, *args: str, launch_args: tuple[str, ...] = PP2) -> dict:
    result = run_launch(
        SCRIPT, nprocs=nprocs, args=list(args), launch_args=list(launch_args), timeout=420
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    return row


def _assert_matches_one_process(row: dict, steps: int = 10) -> None:
    assert row["strategy"] == "pipeline_parallel"
    assert len(row["losses"]) == len(row["ref_losses"]) == steps
    for mine, ref in zip(row["losses"], row["ref_losses"], strict=True):
        assert math.isclose(mine, ref, rel_tol=RTOL), (row["losses"], row["ref_losses"])
    for mine, ref in zip(row["norms"], row["ref_norms"], strict=True):
        assert math.isclose(mine, ref, rel_tol=NORM_RTOL), (row["norms"], row["ref_norms"])
    assert math.isclose(row["eval_loss"], row["ref_eval_loss"], rel_tol=RTOL)
    assert row["same_batches"], "the processes of one pipeline read different batches"
    assert row["optimizer_holds_stage_only"], "an optimizer steps another stage's parameters"
    assert row["forward_only_ok"], "a call without labels did not return the last stage's output"
    assert row["gathered_exactly"], "gather_for_metrics did not return the dataset in order"
    assert row["state_dict_is_whole"], "get_state_dict did not gather every stage"


@pytest.mark.distributed
def test_pp2_llama_1f1b_trains_as_one_process_resumes_and_saves_full_weights(
    tmp_path: Path,
) -> None:
    import torch
    from safetensors.torch import load_file

    row = _run(2, "--save", str(tmp_path))
    assert row["schedule"] == "1F1B" and row["pp_rank"] == 0
    assert row["stage_layers"] == [[0, 0, 2], [1, 2, 4]]  # (rank, first layer, end)
    _assert_matches_one_process(row)

    saved = load_file(str(tmp_path / "pipelined" / "model.safetensors"))
    ref = load_file(str(tmp_path / "reference" / "model.safetensors"))
    assert sorted(saved) == sorted(ref)  # every stage's weights, under the unsplit names
    assert "model.layers.3.mlp.down_proj.weight" in saved and "lm_head.weight" in saved
    for name, tensor in ref.items():
        torch.testing.assert_close(saved[name], tensor, rtol=1e-3, atol=1e-5, msg=name)

    resumed = _run(2, "--resume", str(tmp_path))  # from the state saved after step 5
    assert len(resumed["losses"]) == 5
    for mine, whole in zip(resumed["losses"], row["losses"][5:], strict=True):
        assert math.isclose(mine, whole, rel_tol=1e-6), (resumed["losses"], row["losses"])
    again = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert sorted(again) == sorted(saved)
    for name, tensor in saved.items():
        torch.testing.assert_close(again[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.distributed
def test_pp2_llama_gpipe_trains_as_one_process() -> None:
    row = _run(2, launch_args=(*PP2, "--megatron_lm_pipeline_schedule", "GPipe"))
    assert row["schedule"] == "GPipe"
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_pp2_sequential_with_a_loss_and_split_points_given_in_code_trains_as_one_process() -> None:
    row = _run(2, "--case", "mlp", "--split", "4")
    assert row["stage_layers"] == [[0, 0, 4], [1, 4, 5]]  # five children, split before 4
    _assert_matches_one_process(row)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
def test_pp2_times_two_replicas_trains_as_one_process() -> None:
    row = _run(4, "--batch", "2", "--global_batch", "4")
    assert row["stage_layers"] == [[0, 0, 2], [1, 0, 2], [2, 2, 4], [3, 2, 4]]  # pp outermost
    _assert_matches_one_process(row)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
def test_pp2_times_two_replicas_accumulating_trains_as_one_process() -> None:
    """Inside a window each replica keeps its own sum (averaged at the window's end): the
    same steps as one process accumulating the global batches."""
    row = _run(4, "--batch", "2", "--global_batch", "4", "--accum", "2")
    _assert_matches_one_process(row)
    assert len(row["norms"]) == 5


@pytest.mark.distributed
def test_a_world_the_pipeline_does_not_divide_exits_2_before_workers_start() -> None:
    result = run_launch(SCRIPT, nprocs=3, launch_args=list(PP2), timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "megatron_lm_config.pp_degree" in result.stderr and "3 processes" in result.stderr
    assert "Traceback" not in result.stderr and "RESULT" not in result.stdout


@pytest.mark.distributed
def test_pp2_accumulates_recomputes_and_clips_by_megatron_settings_as_one_process() -> None:
    """2 batches per optimizer step on top of 2 micro-batches each, every layer recomputed
    in backward, the gradients clipped by megatron_lm_config.gradient_clipping (the loop
    only reads the norm): the same losses as one process accumulating and clipping."""
    flags = (
        *PP2,
        "--megatron_lm_recompute_activations",
        "true",
        "--megatron_lm_gradient_clipping",
        "1.0",
    )
    row = _run(2, "--accum", "2", "--backend_clips", launch_args=flags)
    _assert_matches_one_process(row)
    assert len(row["norms"]) == 5 and max(row["norms"]) > 1.0  # clipping had work to do
    # forward and recomputation of 2 micro-batches x 10 batches (27 calls without it: 20,
    # the evaluation calls and the schedules' shape inference)
    assert row["probe_calls"] >= 2 * 2 * 10, row["probe_calls"]
