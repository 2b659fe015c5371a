"""Layouts beyond one data-parallel dimension under ``overdrive launch --simulate``, the
simulated rank alone, against numbers worked out by hand (test_simulate_matches_real.py
holds each layout against its real run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, run_launch

pytest.importorskip("transformers")

SCRIPT = "simulate_check.py"
TINY_LLAMA_BYTES = 22_688 * 4  # simulate_check.py's fp32 parameters, head untied
MATMUL_WEIGHTS = 2 * (32 * 32 * 2 + 32 * 16 * 2 + 3 * 32 * 64) + 64 * 32  # layers and head


def _last_rank(
    flags: list[str], nprocs: int, report: Path, env: dict[str, str] | None = None
) -> dict:
    sim = ["--simulate", "--simulate_ranks", "-1", "--simulate_steps", "2"]
    launch_args = [*sim, "--simulate_json", str(report), *flags]
    result = run_launch(SCRIPT, nprocs=nprocs, launch_args=launch_args, env=env, timeout=300)
    assert_ok(result)
    (rank,) = json.loads(report.read_text())["ranks"]
    assert (rank["rank"], rank["steps"]) == (nprocs - 1, 2), rank
    return rank


@pytest.mark.distributed
def test_fsdp2_by_tensor_parallelism_on_4_processes(tmp_path: Path) -> None:
    """dp_shard=2 x tp=2: each dimension's collectives on its own group, a quarter of the
    model held (FSDP2 needs the 2-D mesh its parameters live on: built outside the fake
    tensors, as the other meshes are)."""
    flags = [
        "--parallelism_config_tp_size",
        "2",
        "--use_fsdp",
        "--fsdp_version",
        "2",
        "--fsdp_transformer_layer_cls_to_wrap",
        "LlamaDecoderLayer",
    ]
    rank = _last_rank(flags, 4, tmp_path / "report.json")
    step = rank["collectives_per_step"][-1]
    groups = {kind: set(entry["groups"]) for kind, entry in step.items()}
    assert groups == {
        "all_gather": {"dp_shard", "tp"},
        "all_reduce": {"tp"},
        "reduce_scatter": {"dp_shard"},
    }
    held = rank["state_bytes"]["parameters"]
    assert TINY_LLAMA_BYTES / 4 <= held <= TINY_LLAMA_BYTES / 4 * 1.02, held
    # FLOPs counted on the DTensors' local shards: half of every matrix product of a
    # 4 x 16-token batch (2 FLOPs per weight and token forward, 4 backward; the attention's
    # CPU kernel is not in PyTorch's FLOP counter)
    assert rank["flops_per_step"][-1] == 6 * 4 * 16 * MATMUL_WEIGHTS // 2
    # The first step too: DTensor's shape propagation, which runs each new operator once on
    # global-shaped fake tensors, is not the rank's work (it counted 65% more before).
    assert rank["flops_per_step"][0] == rank["flops_per_step"][-1]


@pytest.mark.distributed
@pytest.mark.extended  # make test holds pp 2 against its real run (test_simulate_matches_real)
def test_the_last_pipeline_stage(tmp_path: Path) -> None:
    """pp=2, the last stage: it learns what the first stage sends it (the hidden states of
    a micro-batch) without that stage, then sends and receives one micro-batch's
    activations and gradients each way per step (GPipe over 2 micro-batches) and holds
    its half of the model."""
    rank = _last_rank(["--parallelism_config_pp_size", "2"], 2, tmp_path / "report.json")
    step = rank["collectives_per_step"][-1]
    hidden = 2 * 16 * 32 * 4  # a micro-batch of 2 x 16 tokens, hidden 32, fp32
    assert step["recv"]["groups"]["world"] == {"count": 2, "bytes": 2 * hidden}
    assert step["send"]["groups"]["world"] == {"count": 2, "bytes": 2 * hidden}
    held = rank["state_bytes"]["parameters"]
    assert TINY_LLAMA_BYTES / 2 <= held <= TINY_LLAMA_BYTES / 2 * 1.02, held


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.extended  # 30 s: DeepSpeed's import and ZeRO-3's setup
def test_deepspeed_zero3(tmp_path: Path) -> None:
    """ZeRO-3 checks that every rank traced the same modules by comparing integers across
    ranks: under simulation it broadcasts them and compares nothing. The second step
    gathers the parameters and reduce-scatters the gradients over the world, and AdamW's
    two states cover half of the model each."""
    from tests.helpers.deepspeed import DS_ENV

    flags = ["--use_deepspeed", "--zero_stage", "3"]
    rank = _last_rank(flags, 2, tmp_path / "report.json", env=DS_ENV)
    step = rank["collectives_per_step"][-1]
    assert {"all_gather", "reduce_scatter"} <= set(step)
    assert step["reduce_scatter"]["bytes"] == TINY_LLAMA_BYTES  # every gradient, once
    assert rank["state_bytes"]["optimizer_state"] == TINY_LLAMA_BYTES
