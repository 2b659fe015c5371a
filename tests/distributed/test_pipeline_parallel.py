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
from tests.helpers.noise import NOISE_FACTOR, tolerance

pytest.importorskip("transformers")

SCRIPT = "pp_checks.py"
PP2 = ("--use_megatron_lm", "--megatron_lm_pp_degree", "2", "--megatron_lm_num_micro_batches", "2")


def _run(nprocs: int, *args: str, launch_args: tuple[str, ...] = PP2) -> dict:
    (row,) = _runs(nprocs, *args, launch_args=launch_args)
    return row


def _runs(nprocs: int, *args: str, launch_args: tuple[str, ...] = PP2) -> list[dict]:
    """One launch; a row per optimizer of its ``--optimizer`` list, in that order."""
    result = run_launch(
        SCRIPT, nprocs=nprocs, args=list(args), launch_args=list(launch_args), timeout=420
    )
    assert_ok(result)
    return result_rows(result.stdout)


def _assert_matches_one_process(row: dict, steps: int = 10) -> None:
    assert row["strategy"] == "pipeline_parallel"
    assert len(row["losses"]) == len(row["ref_losses"]) == steps
    loss_tol = tolerance(row["noise_losses"], row["ref_losses"])
    for mine, ref in zip(row["losses"], row["ref_losses"], strict=True):
        assert math.isclose(mine, ref, rel_tol=loss_tol), (row["losses"], row["ref_losses"])
    norm_tol = tolerance(row["noise_norms"], row["ref_norms"])
    for mine, ref in zip(row["norms"], row["ref_norms"], strict=True):
        assert math.isclose(mine, ref, rel_tol=norm_tol), (row["norms"], row["ref_norms"])
    evals = [[value] for value in row["noise_evals"]]  # one eval loss per order, after training
    eval_tol = tolerance(evals, [row["ref_eval_loss"]])
    assert math.isclose(row["eval_loss"], row["ref_eval_loss"], rel_tol=eval_tol)
    assert row["same_batches"], "the processes of one pipeline read different batches"
    assert row["optimizer_holds_stage_only"], "an optimizer steps another stage's parameters"
    assert row["forward_only_ok"], "a call without labels did not return the last stage's output"
    assert row["gathered_exactly"], "gather_for_metrics did not return the dataset in order"
    assert row["state_dict_is_whole"], "get_state_dict did not gather every stage"


def _weights(folder: Path, *names: str) -> list[dict]:
    from safetensors.torch import load_file

    return [load_file(str(folder / name / "model.safetensors")) for name in names]


def _update_error(mine: dict, ref: dict, initial: dict) -> float:
    """The largest relative difference of two runs' updates (final minus initial weights),
    over the tensors: a gradient scaled by 1 + e under SGD shows here as about e."""
    worst = 0.0
    for name, start in initial.items():
        ours, theirs = mine[name] - start, ref[name] - start
        worst = max(worst, float((ours - theirs).norm() / theirs.norm().clamp_min(1e-30)))
    return worst


def _summation_noise(folder: Path) -> float:
    """The measured arithmetic noise: the update error between two one-process references
    that differ only in the order their gradients are summed (whole batch vs the pipeline's
    micro-batches). Every correct layout is another such order."""
    initial, whole, micro = _weights(folder, "initial", "reference", "reference_micro")
    noise = _update_error(micro, whole, initial)
    assert 0.0 < noise < 1e-3, noise  # two real orders differ, but only in rounding
    return noise


@pytest.fixture(scope="module")
def pp2_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """PP=2 (1F1B) on 2 processes, one launch training under AdamW with clipping and then
    under plain SGD, each saved to its own subfolder: (the folder, the row of each)."""
    folder = tmp_path_factory.mktemp("pp2")
    rows = _runs(2, "--save", str(folder), "--optimizer", "adamw,sgd")
    assert [row["optimizer"] for row in rows] == ["adamw", "sgd"]
    return folder, {row["optimizer"]: row for row in rows}


@pytest.mark.distributed
def test_pp2_llama_1f1b_trains_as_one_process_resumes_and_saves_full_weights(
    pp2_runs: tuple[Path, dict[str, dict]],
) -> None:
    """AdamW with clipping. Adam divides each gradient by its own size, so its weights hide
    a wrong gradient scale (the norms do not): the weights are held to the measured noise."""
    import torch

    tmp_path, row = pp2_runs[0] / "adamw", pp2_runs[1]["adamw"]
    assert row["schedule"] == "1F1B" and row["pp_rank"] == 0
    assert row["stage_layers"] == [[0, 0, 2], [1, 2, 4]]  # (rank, first layer, end)
    _assert_matches_one_process(row)

    initial, saved, ref = _weights(tmp_path, "initial", "pipelined", "reference")
    assert sorted(saved) == sorted(ref)  # every stage's weights, under the unsplit names
    assert "model.layers.3.mlp.down_proj.weight" in saved and "lm_head.weight" in saved
    error, noise = _update_error(saved, ref, initial), _summation_noise(tmp_path)
    assert error <= NOISE_FACTOR * noise, (error, noise)

    resumed = _run(2, "--resume", str(tmp_path))  # from the state saved after step 5
    assert len(resumed["losses"]) == 5
    for mine, whole in zip(resumed["losses"], row["losses"][5:], strict=True):
        assert math.isclose(mine, whole, rel_tol=1e-6), (resumed["losses"], row["losses"])
    (again,) = _weights(tmp_path, "resumed")
    assert sorted(again) == sorted(saved)
    for name, tensor in saved.items():  # the same layout and order: only resume can differ
        torch.testing.assert_close(again[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


def _sgd_update_error(folder: Path) -> tuple[float, float]:
    initial, saved, micro = _weights(folder, "initial", "pipelined", "reference_micro")
    return _update_error(saved, micro, initial), _summation_noise(folder)


@pytest.mark.distributed
def test_pp2_sgd_updates_are_one_process_and_a_wrong_gradient_scale_is_caught(
    tmp_path: Path, pp2_runs: tuple[Path, dict[str, dict]]
) -> None:
    """Plain SGD without clipping: the update is the gradient times the learning rate, so a
    wrong scale shows in proportion. The pipeline sums micro-batches in the order of the
    micro-batched reference (equal here to the last bit), within the noise of another order
    at worst; a deliberate 1% scale error in the pipeline's loss division is far outside it,
    and the AdamW run's norm check catches the same error."""
    error, noise = _sgd_update_error(pp2_runs[0] / "sgd")
    _assert_matches_one_process(pp2_runs[1]["sgd"])
    assert error <= NOISE_FACTOR * noise, (error, noise)

    # the wrong scale under SGD, then under AdamW, in one launch
    folder = tmp_path / "wrong"
    sgd, adamw = _runs(
        2, "--save", str(folder), "--optimizer", "sgd,adamw", "--scale_error", "1.01"
    )
    assert (sgd["optimizer"], adamw["optimizer"]) == ("sgd", "adamw")
    wrong, noise = _sgd_update_error(folder / "sgd")
    assert wrong > 100 * noise, (wrong, noise)
    drift = max(abs(a - b) / b for a, b in zip(adamw["norms"], adamw["ref_norms"], strict=True))
    assert drift > 2 * tolerance(adamw["noise_norms"], adamw["ref_norms"]), drift


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
def test_pp2_sequential_from_parallelism_config_takes_its_loss_and_split_points_there() -> None:
    """``ParallelismConfig(pp_size=2, pp_loss_fn=..., pp_split_points=...)``: a plain model's
    pipeline without choosing MEGATRON_LM (whose distributed optimizer a pipeline refuses)."""
    row = _run(2, "--case", "mlp", "--split", "4", "--parallelism", "pp_size=2", launch_args=())
    assert row["stage_layers"] == [[0, 0, 4], [1, 4, 5]]
    _assert_matches_one_process(row)


@pytest.mark.distributed
def test_a_sequential_without_a_loss_names_where_the_loss_goes() -> None:
    """The refusal's fix names the setting of the pipeline's own origin: here
    ``ParallelismConfig``, not ``MegatronLMPlugin`` (which would choose another backend)."""
    result = run_launch(
        SCRIPT,
        nprocs=2,
        args=["--case", "mlp", "--parallelism", "pp_size=2", "--no_loss_fn"],
        launch_args=[],
        timeout=420,
    )
    assert result.returncode != 0
    assert "needs a loss function" in result.stderr, result.stderr[-2000:]
    assert "ParallelismConfig(pp_loss_fn=lambda output, target: ...)" in result.stderr
    assert "MegatronLMPlugin" not in result.stderr


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
@pytest.mark.extended
def test_pp2_times_two_replicas_accumulating_trains_as_one_process() -> None:
    """Inside a window each replica keeps its own sum (averaged at the window's end): the
    same steps as one process accumulating the global batches."""
    row = _run(4, "--batch", "2", "--global_batch", "4", "--accum", "2")
    _assert_matches_one_process(row)
    assert len(row["norms"]) == 5


# --- pipeline x tensor x data parallelism: the parallelize chain on each stage -------------
PP2_TP2 = (*PP2, "--megatron_lm_tp_degree", "2")
FSDP2 = ("--use_fsdp", "--fsdp_version", "2")
PP2_SHARD2 = ("--batch", "2", "--global_batch", "4", "--parallelism", "pp_size=2,dp_shard_size=2")


def _assert_losses_within(row: dict, rel: float) -> None:
    """The issue's bar besides the measured noise: the loss trace within ``rel`` of one
    process."""
    worst = max(abs(a - b) / abs(b) for a, b in zip(row["losses"], row["ref_losses"]))
    assert worst <= rel, (worst, row["losses"], row["ref_losses"])


def _assert_chain_trains_as_one_process(folder: Path, nprocs: int, *args: str, launch: tuple):
    """Under AdamW the loss trace within 1e-4 of one process. Tensor parallelism also splits
    every matmul's sum, and Adam magnifies that rounding in the later steps (measured here,
    PP2 x TP2: losses within 2.1e-5, norms 4e-3 apart by step 10, where one process summing
    in other orders stays within 5e-7), so the gradients themselves are held to the measured
    noise under SGD: norms, losses and the weights' updates (a 1% gradient scale error shows
    as 1e-2)."""
    # one launch trains both (an Accelerator and model each): AdamW, then SGD
    adamw, sgd = _runs(
        nprocs, "--save", str(folder), "--optimizer", "adamw,sgd", *args, launch_args=launch
    )
    assert (adamw["optimizer"], sgd["optimizer"]) == ("adamw", "sgd")
    _assert_losses_within(adamw, 1e-4)
    _assert_matches_one_process(sgd)
    folder = folder / "sgd"
    initial, saved, micro, whole = _weights(
        folder, "initial", "pipelined", "reference_micro", "reference"
    )
    assert sorted(saved) == sorted(micro)  # save_model gathers every stage's parts
    # Over all weights together: a norm weight's tiny update (7e-4) rounds differently
    # under tp's split sums (1.6e-4 of it) where batch reorderings leave it exact, so a
    # per-tensor maximum would measure that one tensor. Measured: PP2 x TP2 7.4e-7 from one
    # process, the other order 5.2e-7.
    error = _overall_update_error(saved, micro, initial)
    noise = _overall_update_error(whole, micro, initial)
    assert 0.0 < noise < 1e-3 and error <= NOISE_FACTOR * noise, (error, noise)
    return adamw


def _overall_update_error(mine: dict, ref: dict, initial: dict) -> float:
    """The relative difference of two runs' updates over every weight at once."""
    diff = sum(float(((mine[k] - s) - (ref[k] - s)).pow(2).sum()) for k, s in initial.items())
    size = sum(float((ref[k] - s).pow(2).sum()) for k, s in initial.items())
    return math.sqrt(diff / size)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
def test_pp2_times_tp2_from_megatron_lm_config_trains_as_one_process(tmp_path: Path) -> None:
    row = _assert_chain_trains_as_one_process(tmp_path, 4, launch=PP2_TP2)
    assert row["stage_layers"] == [[0, 0, 2], [1, 0, 2], [2, 2, 4], [3, 2, 4]]  # pp outermost
    assert any("'tp'" in lay and "Shard(dim=0)" in lay for lay in row["layouts"]), row["layouts"]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
def test_pp2_times_fsdp2_from_parallelism_config_trains_as_one_process(tmp_path: Path) -> None:
    row = _assert_chain_trains_as_one_process(tmp_path, 4, *PP2_SHARD2, launch=FSDP2)
    assert row["stage_layers"] == [[0, 0, 2], [1, 0, 2], [2, 2, 4], [3, 2, 4]]
    assert any("'dp_shard'" in lay and "Shard(dim=0)" in lay for lay in row["layouts"])
    _assert_matches_one_process(row)  # no tp: AdamW within the measured noise too


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_a_pp2_tp2_checkpoint_resumes_under_pp2_fsdp2(tmp_path: Path) -> None:
    """Saved half way by pipeline x tensor parallelism, continued by pipeline x FSDP2: the
    losses and final weights of the uninterrupted run, within the noise of another layout."""
    import torch

    whole = _run(4, "--save", str(tmp_path), launch_args=PP2_TP2)
    resumed = _run(4, "--resume", str(tmp_path), *PP2_SHARD2, launch_args=FSDP2)
    assert len(resumed["losses"]) == 5
    for mine, theirs in zip(resumed["losses"], whole["losses"][5:], strict=True):
        assert math.isclose(mine, theirs, rel_tol=1e-5), (resumed["losses"], whole["losses"])
    saved, again = _weights(tmp_path, "pipelined", "resumed")
    for name, tensor in saved.items():
        torch.testing.assert_close(again[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_pp2_times_fsdp2_times_tp2_on_eight_processes_trains_as_one_process(
    tmp_path: Path,
) -> None:
    sizes = (
        "--batch",
        "2",
        "--global_batch",
        "4",
        "--parallelism",
        "pp_size=2,dp_shard_size=2,tp_size=2",
    )
    row = _assert_chain_trains_as_one_process(tmp_path, 8, *sizes, launch=FSDP2)
    assert any("'dp_shard', 'tp'" in lay for lay in row["layouts"]), row["layouts"]  # 2-D


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


# --- checkpoints in the sharded format, across layouts -----------------------------------
CKPT_SCRIPT = "pp_ckpt.py"
# Another layout sums in another order. Measured here: losses within 1e-7 relative, final
# weights within 2.9e-6 after the continuation's AdamW steps (1/4 of the 1e-5 allowed); the
# norms of the same-layout tests above are what catch a wrong gradient scale.
CROSS_RTOL = 1e-5
UNSAFE = (".bin", ".pt", ".pth", ".pkl", ".distcp")  # and torch.distributed's .metadata


def _ckpt(directory: Path, nprocs: int, *args: str) -> dict:
    """``pp_ckpt.py`` under PP=2, or under the layout ``--fsdp`` / ``--tp`` set in code."""
    result = run_launch(
        CKPT_SCRIPT,
        nprocs=nprocs,
        args=["--dir", str(directory), *args],
        launch_args=[] if {"--fsdp", "--tp"} & set(args) else list(PP2),
        timeout=420,
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    return row


def _tensor_names(path: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return set(f.keys())


def _assert_continues(row: dict, whole: dict, start: int) -> None:
    assert len(row["losses"]) == len(whole["losses"]) - start
    for mine, ref in zip(row["losses"], whole["losses"][start:], strict=True):
        assert math.isclose(mine, ref, rel_tol=CROSS_RTOL), (row["losses"], whole["losses"])


def _assert_same_weights(directory: Path, *others: str, final: str = "pp_final") -> None:
    import torch
    from safetensors.torch import load_file

    weights = load_file(str(directory / final / "model.safetensors"))
    for other in others:
        again = load_file(str(directory / other / "model.safetensors"))
        assert sorted(again) == sorted(weights)
        for name, tensor in weights.items():
            torch.testing.assert_close(again[name], tensor, rtol=1e-5, atol=1e-5, msg=name)


def _assert_stage_files(saved: Path, full: set[str], writers: tuple[int, int]) -> None:
    """Each stage's first replica wrote its own stage's tensors, nothing else; the main
    process's tree names every stage's; no pickle anywhere."""
    import json

    files = [p for p in saved.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in UNSAFE or p.name == ".metadata"], files
    first, last = (_tensor_names(saved / f"model_0.rank{r}.safetensors") for r in writers)
    assert "model.embed_tokens.weight" in first and "lm_head.weight" in last
    assert not first & last and first | last == full
    assert all(
        n.startswith(("model.embed_tokens", "model.layers.0.", "model.layers.1.")) for n in first
    )
    wrote = {int(p.name.split(".rank")[1].split(".")[0]) for p in saved.glob("*.safetensors")}
    assert wrote == set(writers), "a second replica of a stage wrote its copy too"
    opt_last = _tensor_names(saved / f"optimizer_0.rank{writers[1]}.safetensors")
    assert opt_last == {f"state/{n}/{k}" for n in last for k in ("step", "exp_avg", "exp_avg_sq")}
    tree = json.loads((saved / "optimizer_0.rank0.json").read_text())["tree"]
    (group,) = tree["param_groups"]
    assert sorted(group["params"]) == sorted(full) == sorted(tree["state"])
    assert group["lr"] == 1e-2


@pytest.mark.distributed
@pytest.mark.extended
def test_pp2_checkpoints_resume_under_fsdp2_and_back_and_under_tp2(tmp_path: Path) -> None:
    """A chain of resumes on the same two processes, each from the previous run's sharded
    save: PP=2 (saved asynchronously after step 3, training on while it is written) ->
    FSDP2 FULL_SHARD (saves after 5) -> PP=2 (after 7) -> TP=2. Each stage's file holds only
    its own tensors; every run continues to the uninterrupted losses and ends at its
    weights."""
    from overdrive.checkpoint.shards import merge_full

    whole = _ckpt(
        tmp_path, 2, "--tag", "pp_final", "--save", "at3", "--save_at", "3", "--async_save"
    )
    assert whole["strategy"] == "pipeline_parallel" and len(whole["losses"]) == 10
    full = _tensor_names(tmp_path / "pp_final" / "model.safetensors")
    _assert_stage_files(tmp_path / "at3", full, writers=(0, 1))
    merged = merge_full(tmp_path / "at3", "model_0")  # merge-weights: the whole model
    assert set(merged) == full

    chain = [  # (extra flags, resumed from, saves, strategy)
        (("--fsdp", "--batch", "2"), 3, 5, "fsdp"),
        ((), 5, 7, "pipeline_parallel"),
        (("--tp", "2"), 7, 0, "tensor_parallel"),
    ]
    for flags, start, save_at, strategy in chain:
        saves = ("--save", f"at{save_at}", "--save_at", str(save_at)) if save_at else ()
        resume = ("--resume", f"at{start}", "--start", str(start))
        row = _ckpt(tmp_path, 2, *flags, "--tag", f"from{start}", *resume, *saves)
        assert row["strategy"] == strategy
        _assert_continues(row, whole, start)
    _assert_same_weights(tmp_path, "from3", "from5", "from7")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_pp2_times_two_replicas_checkpoint_is_written_once_per_stage(tmp_path: Path) -> None:
    """PP=2 x dp=2: the first replica of each stage writes it (ranks 0 and 2); FSDP2 over
    the four processes resumes it to the uninterrupted losses and weights."""
    whole = _ckpt(
        tmp_path, 4, "--batch", "2", "--tag", "pp_final", "--save", "pp_at4", "--save_at", "4"
    )
    full = _tensor_names(tmp_path / "pp_final" / "model.safetensors")
    _assert_stage_files(tmp_path / "pp_at4", full, writers=(0, 2))
    fsdp = _ckpt(
        tmp_path,
        4,
        *("--fsdp", "--batch", "1", "--tag", "fsdp_final", "--resume", "pp_at4"),
        *("--start", "4"),
    )
    _assert_continues(fsdp, whole, 4)
    _assert_same_weights(tmp_path, "fsdp_final")
