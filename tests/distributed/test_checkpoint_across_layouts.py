"""One checkpoint, another layout: a tiny Llama's save_state under pipeline or tensor
parallelism resumes under DDP and in one plain process (no launcher) to the uninterrupted
run's losses and weights (``pp_ckpt.py``; FSDP <-> DDP and one process: test_fsdp_checkpoint).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.test_pipeline_parallel import (
    CKPT_SCRIPT,
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


@pytest.mark.distributed
def test_tp2_checkpoint_resumes_under_ddp_and_a_ddp_one_in_one_plain_process(
    tmp_path: Path,
) -> None:
    """TP=2 -> DDP (2) -> one plain process: each continues to the uninterrupted losses; the
    last one's weights are the uninterrupted TP run's."""
    whole = _ckpt(tmp_path, 2, "--tp", "2", "--tag", "tp_final", "--save", "tp4", "--save_at", "4")
    assert whole["strategy"] == "tensor_parallel"
    ddp = _ddp(
        tmp_path,
        "--tag",
        "ddp",
        "--resume",
        "tp4",
        "--start",
        "4",
        *("--save", "ddp7", "--save_at", "7"),
    )
    _assert_continues(ddp, whole, 4)
    plain, _ = _plain(tmp_path, "--tag", "plain", "--resume", "ddp7", "--start", "7")
    _assert_continues(plain, whole, 7)
    _assert_same_weights(tmp_path, "ddp", "plain", final="tp_final")
    _assert_from_pretrained(tmp_path / "tp_final", like=tmp_path / "tp_final")
    _assert_from_pretrained(
        _merge(tmp_path / "tp4", tmp_path / "tp4_merged"), like=tmp_path / "tp4_merged"
    )
