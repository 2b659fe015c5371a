"""One checkpoint, another layout: a tiny Llama's save_state under pipeline or tensor
parallelism resumes under DDP and in one plain process (no launcher) to the uninterrupted
run's losses and weights (``pp_ckpt.py``; FSDP <-> DDP and one process: test_fsdp_checkpoint);
the weights save_model and merge-weights write under every layout load with from_pretrained.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.distributed.test_pipeline_parallel import (
    CKPT_SCRIPT,
    PP2,
    _assert_continues,
    _assert_same_weights,
    _ckpt,
)
from tests.helpers.dist import (
    REPO,
    SCRIPTS,
    assert_ok,
    clean_env,
    result_rows,
    run_launch,
    run_python,
)
from tests.helpers.noise import FLOOR, NOISE_FACTOR, tolerance

pytest.importorskip("transformers")


def _assert_from_pretrained(folder: Path, *, like: Path | None = None) -> None:
    """``LlamaForCausalLM.from_pretrained`` reads ``folder`` (one file, or shards with an
    index; the model's config written beside them) into the weights
    ``model.safetensors`` in ``like`` (default: ``folder``) holds."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    sys.path.insert(0, str(SCRIPTS))
    from tiny_llama import tiny_llama

    # The weights' folder plus the model's config, as a user writes it beside them.
    tiny_llama(layers=4, vocab=128, seq=8).config.save_pretrained(str(folder))
    model = LlamaForCausalLM.from_pretrained(str(folder))
    loaded, want = model.state_dict(), load_file(str((like or folder) / "model.safetensors"))
    assert sorted(loaded) == sorted(want)  # nothing left to from_pretrained's random init
    for name, tensor in want.items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0, msg=name)


def _merge(checkpoint: Path, out: Path, *flags: str) -> Path:
    """``overdrive merge-weights`` on a checkpoint; returns the folder of its model's weights."""
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", "merge-weights", str(checkpoint), str(out), *flags],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


def _ddp(directory: Path, *args: str) -> dict:
    """``pp_ckpt.py`` under plain DDP on two processes (a global batch of 4: 2 each)."""
    result = run_launch(
        CKPT_SCRIPT, nprocs=2, args=["--dir", str(directory), "--batch", "2", *args], timeout=420
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["strategy"] == "ddp"
    return row


def _plain(directory: Path, *args: str) -> tuple[dict, str]:
    """``pp_ckpt.py`` in one plain ``python`` process (no launcher, no process group)."""
    result = run_python(SCRIPTS / CKPT_SCRIPT, "--dir", str(directory), *args, timeout=420)
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["strategy"] == "single"
    return row, result.stderr


@pytest.mark.distributed
def test_pp2_checkpoint_resumes_in_one_plain_process_and_under_ddp(tmp_path: Path) -> None:
    whole = _ckpt(tmp_path, 2, "--tag", "pp_final", "--save", "at5", "--save_at", "5")
    assert whole["strategy"] == "pipeline_parallel"
    resume = ("--resume", "at5", "--start", "5")
    plain, stderr = _plain(tmp_path, "--tag", "plain", *resume)
    assert "saved by 2 process(es) and is resumed by 1" in stderr
    _assert_continues(plain, whole, 5)
    _assert_continues(_ddp(tmp_path, "--tag", "ddp", *resume), whole, 5)
    _assert_same_weights(tmp_path, "plain", "ddp")
    # The weights of each layout, as save_model wrote them and merged from the PP checkpoint
    # (in shards of at most 100KB, with an index), load with from_pretrained as they are.
    for folder in ("pp_final", "plain", "ddp"):
        _assert_from_pretrained(tmp_path / folder)
    merged = _merge(tmp_path / "at5", tmp_path / "merged", "--max_shard_size", "100KB")
    assert (merged / "model.safetensors.index.json").is_file()
    _assert_from_pretrained(merged, like=_merge(tmp_path / "at5", tmp_path / "one_file"))


@pytest.fixture(scope="module")
def tp2_then_ddp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """(folder, uninterrupted TP=2 run saving ``tp4``, DDP run resumed from it saving
    ``ddp7``): the DDP checkpoint the pipeline refusal below reads too."""
    folder = tmp_path_factory.mktemp("tp2-then-ddp")
    whole = _ckpt(folder, 2, "--tp", "2", "--tag", "tp_final", "--save", "tp4", "--save_at", "4")
    ddp = _ddp(
        folder,
        "--tag",
        "ddp",
        "--resume",
        "tp4",
        "--start",
        "4",
        *("--save", "ddp7", "--save_at", "7"),
    )
    return folder, whole, ddp


@pytest.mark.distributed
def test_tp2_checkpoint_resumes_under_ddp_and_a_ddp_one_in_one_plain_process(
    tp2_then_ddp: tuple[Path, dict, dict],
) -> None:
    """TP=2 -> DDP (2) -> one plain process: each continues to the uninterrupted losses; the
    last one's weights are the uninterrupted TP run's."""
    folder, whole, ddp = tp2_then_ddp
    assert whole["strategy"] == "tensor_parallel"
    _assert_continues(ddp, whole, 4)
    plain, _ = _plain(folder, "--tag", "plain", "--resume", "ddp7", "--start", "7")
    _assert_continues(plain, whole, 7)
    _assert_same_weights(folder, "ddp", "plain", final="tp_final")
    _assert_from_pretrained(folder / "tp_final", like=folder / "tp_final")
    _assert_from_pretrained(
        _merge(folder / "tp4", folder / "tp4_merged"), like=folder / "tp4_merged"
    )
    # DDP's save_state writes each file whole, from the main process (as ZeRO-3's does)
    assert (folder / "ddp7" / "model_0.safetensors").is_file()
    _assert_from_pretrained(
        _merge(folder / "ddp7", folder / "ddp7_merged"), like=folder / "ddp7_merged"
    )


@pytest.mark.distributed
def test_fsdp2_sharded_save_model_and_merged_checkpoint_load_with_from_pretrained(
    tmp_path: Path,
) -> None:
    """Under FSDP2 with sharded state dicts, save_model gathers full weights, and the sharded
    checkpoint merged by merge-weights equals them: from_pretrained reads both as they are."""
    flags = ("--fsdp", "--batch", "2", "--tag", "fsdp", "--save", "at10", "--save_at", "10")
    row = _ckpt(tmp_path, 2, *flags)
    assert row["strategy"] == "fsdp"
    assert (tmp_path / "at10" / "model_0.rank1.safetensors").is_file()  # a sharded save
    _assert_from_pretrained(tmp_path / "fsdp")
    merged = _merge(tmp_path / "at10", tmp_path / "merged", "--max_shard_size", "100KB")
    assert (merged / "model.safetensors.index.json").is_file()
    _assert_from_pretrained(merged, like=tmp_path / "fsdp")


# ZeRO-3's form of the FSDP2 test above, in make extended. make test keeps each of its checks:
# from_pretrained of save_model's weights (the tests above), merge-weights of a checkpoint
# whose files are written whole, as ZeRO-3's are (the TP -> DDP test above, its ddp7),
# save_model gathering ZeRO-3's partitions (test_deepspeed.py::
# test_zero_stage_trains_like_one_process[3]) and a ZeRO-3 save_state read back whole
# (test_deepspeed_resume.py::test_a_zero3_checkpoint_resumes_in_one_plain_process).
@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.extended
def test_zero3_save_model_and_merged_checkpoint_load_with_from_pretrained(
    tmp_path: Path,
) -> None:
    """Under ZeRO-3 (each process holds a partition of every weight), save_model gathers the
    full weights, and merge-weights of its save_state gives the same: from_pretrained reads
    both as they are."""
    pytest.importorskip("deepspeed")
    from tests.helpers.deepspeed import DS_ENV

    args = ["--dir", str(tmp_path), "--batch", "2", "--tag", "zero3", "--save", "at10"]
    result = run_launch(
        CKPT_SCRIPT,
        nprocs=2,
        env=DS_ENV,
        launch_args=["--use_deepspeed", "--zero_stage", "3", "--gradient_clipping", "1.0"],
        args=[*args, "--save_at", "10"],
        timeout=420,
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["strategy"] == "deepspeed"
    _assert_from_pretrained(tmp_path / "zero3")
    merged = _merge(tmp_path / "at10", tmp_path / "merged")
    _assert_from_pretrained(merged, like=tmp_path / "zero3")


# --- the other cells of the matrix (docs/checkpointing.md) ------------------------------
# Every run below trains the same global batches of 4 on two processes, so each continues to
# the uninterrupted PP=2 run's losses (CROSS_RTOL, the measured order-of-summation spread);
# DeepSpeed clips by its own setting, the loop's limit of 1.0.

ZERO = ["--use_deepspeed", "--gradient_clipping", "1.0", "--zero_stage"]


def _zero(directory: Path, stage: int, *args: str) -> dict:
    """``pp_ckpt.py`` under DeepSpeed ZeRO ``stage`` on two processes (2 samples each)."""
    from tests.helpers.deepspeed import DS_ENV

    result = run_launch(
        CKPT_SCRIPT,
        nprocs=2,
        env=DS_ENV,
        launch_args=[*ZERO, str(stage)],
        args=["--dir", str(directory), "--batch", "2", *args],
        timeout=420,
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["strategy"] == "deepspeed"
    return row


def _distance(directory: Path, a: str, b: str) -> float:
    """The largest absolute difference between two runs' saved weights."""
    from safetensors.torch import load_file

    x, y = (
        load_file(str(directory / a / "model.safetensors")),
        load_file(str(directory / b / "model.safetensors")),
    )
    assert sorted(x) == sorted(y)
    return max((x[k] - y[k]).abs().max().item() for k in x)


def _assert_within_noise(directory: Path, uninterrupted: list[str], resumed: list[str]) -> None:
    """Each resumed run ends within noise of the PP reference's weights, where the noise is
    how far other layouts' uninterrupted runs end from it (tests/helpers/noise.py: 3x, floor
    1e-6). Under AdamW a layout's order of summation moves the weights by up to about 3e-5
    here; a resume that lost AdamW's moments ends about 1e-2 away."""
    noise = max(_distance(directory, "pp_final", run) for run in uninterrupted)
    bound = max(NOISE_FACTOR * noise, FLOOR)
    for run in resumed:
        assert _distance(directory, "pp_final", run) <= bound, (run, bound)


def _continues_within(whole: dict, samples: list[dict]) -> Callable[[dict, int], None]:
    """A check that a run resumed after ``start`` steps continues ``whole``'s losses within
    the noise of ``samples`` (uninterrupted runs of other layouts; tests/helpers/noise.py)."""
    tol = tolerance([run["losses"] for run in samples], whole["losses"])

    def follows(row: dict, start: int) -> None:
        assert len(row["losses"]) == len(whole["losses"]) - start
        for mine, ref in zip(row["losses"], whole["losses"][start:], strict=True):
            assert math.isclose(mine, ref, rel_tol=tol), (row["losses"], whole["losses"], tol)

    return follows


def _steps(start: int, save_at: int = 0) -> tuple[str, ...]:
    """Resume from ``at{start}`` (unless 0) and save ``at{save_at}`` (unless 0)."""
    resume = ("--resume", f"at{start}", "--start", str(start)) if start else ()
    return (*resume, *(("--save", f"at{save_at}", "--save_at", str(save_at)) if save_at else ()))


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.extended
def test_a_chain_ddp_tp_zero2_pp_zero3_continues_the_uninterrupted_run(tmp_path: Path) -> None:
    """DDP -> TP=2 -> ZeRO-2 -> PP=2 -> ZeRO-3, each resuming from the previous one's
    save_state: every run continues the uninterrupted PP run within the noise of
    uninterrupted DDP and ZeRO-3 runs, and the chain ends at its weights."""
    pytest.importorskip("deepspeed")
    whole = _ckpt(tmp_path, 2, "--tag", "pp_final")
    samples = [
        _zero(tmp_path, 3, "--tag", "zero3_whole"),
        _ddp(tmp_path, "--tag", "ddp", *_steps(0, 2)),
    ]
    follows = _continues_within(whole, samples)
    tp = _ckpt(tmp_path, 2, "--tp", "2", "--tag", "tp", *_steps(2, 4))
    assert tp["strategy"] == "tensor_parallel"
    follows(tp, 2)
    follows(_zero(tmp_path, 2, "--tag", "zero2", *_steps(4, 6)), 4)
    pp = _ckpt(tmp_path, 2, "--tag", "pp", *_steps(6, 8))
    assert pp["strategy"] == "pipeline_parallel"
    follows(pp, 6)
    follows(_zero(tmp_path, 3, "--tag", "zero3", *_steps(8)), 8)
    _assert_within_noise(tmp_path, ["ddp", "zero3_whole"], ["tp", "zero2", "pp", "zero3"])


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.extended
def test_zero2_resumes_under_ddp_and_tp_then_pp_and_fsdp2_under_tp(tmp_path: Path) -> None:
    """ZeRO-2 -> DDP, ZeRO-2 -> TP=2 -> PP=2, FSDP2 -> TP=2: each continues the
    uninterrupted PP run within the noise of uninterrupted ZeRO-2 and FSDP2 runs."""
    pytest.importorskip("deepspeed")
    whole = _ckpt(tmp_path, 2, "--tag", "pp_final")
    fsdp = ("--fsdp", "--batch", "2", "--tag", "fsdp", *_steps(0, 5))
    samples = [_zero(tmp_path, 2, "--tag", "zero2", *_steps(0, 3)), _ckpt(tmp_path, 2, *fsdp)]
    follows = _continues_within(whole, samples)
    follows(_ddp(tmp_path, "--tag", "ddp", *_steps(3)), 3)
    follows(_ckpt(tmp_path, 2, "--tp", "2", "--tag", "tp", *_steps(3, 6)), 3)
    follows(_ckpt(tmp_path, 2, "--tag", "pp", *_steps(6)), 6)
    follows(_ckpt(tmp_path, 2, "--tp", "2", "--tag", "tp5", *_steps(5)), 5)
    _assert_within_noise(tmp_path, ["zero2", "fsdp"], ["ddp", "tp", "pp", "tp5"])


@pytest.mark.distributed
def test_a_ddp_checkpoint_is_refused_by_a_pipeline_naming_the_cause(
    tp2_then_ddp: tuple[Path, dict, dict],
) -> None:
    """R2: a pipeline stage's optimizer cannot tell which entries of a state keyed by
    position are its own; the message says so and how to move the state over."""
    folder, _, _ = tp2_then_ddp  # ddp7: saved under DDP after 7 steps
    resume = ("--resume", "ddp7", "--start", "7")
    result = run_launch(
        CKPT_SCRIPT,
        nprocs=2,
        args=["--dir", str(folder), "--tag", "pp_refused", *resume],
        launch_args=list(PP2),
        timeout=420,
    )
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "keyed by position" in text and "only its pipeline stage's parameters" in text, text
    assert "save there under FSDP or TP (keyed by name)" in text
