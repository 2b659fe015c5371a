"""Context parallelism on CPU processes: the loop of Hugging Face Accelerate's guide
(``accelerator.maybe_context_parallel(buffers=...)`` around each step) trains a tiny Llama
as one process would, and its checkpoint resumes under another layout.

Each run of ``cp_checks.py`` also trains an unsplit copy on the whole global batch in every
process (the one-process reference) and again summed in another order, whose distance from
the reference is the measured noise (``tests/helpers/noise.py``). ``make test`` runs the
2-process case; the run of 4 processes carries the ``four_processes`` and ``extended``
markers (``make parallel`` and ``make extended`` run it).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch
from tests.helpers.noise import tolerance

pytest.importorskip("transformers")

SCRIPT = "cp_checks.py"
# Measured here (8 AdamW steps, lr 1e-2): cp=2 losses within 8.7e-7 of one process, norms
# within 8.2e-5 (summing the batch in other orders: 1.8e-6 and 1.9e-4); cp=2 x dp_shard=2
# losses within 3.9e-7, norms within 3.0e-5 (other orders, the math SDPA kernel among them:
# 9.8e-8 and 4.6e-6). The first step's norm agrees to 0 and 7e-8: the ring's merged softmax
# rounds differently, and AdamW makes the difference grow over the steps to 7x the batch's
# reordering. A 1% gradient scale error moves the first norm by 1e-2.
RTOL = 1e-4
FSDP2_FLAGS = ("--use_fsdp", "--fsdp_version", "2", "--fsdp_state_dict_type", "SHARDED_STATE_DICT")


def _run(nprocs: int, *args: str, launch_args: tuple[str, ...] = ()) -> dict:
    result = run_launch(
        SCRIPT, nprocs=nprocs, args=list(args), launch_args=list(launch_args), timeout=420
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    return row


def _assert_matches_one_process(row: dict, cp: int) -> None:
    assert row["strategy"] == "fsdp" and row["fsdp_applied"]
    assert row["layout"]["cp"] == cp
    assert row["same_batches"], "the processes of one cp group read different batches"
    assert row["local_lengths"] == [16 // cp] * len(row["losses"])  # each kept its chunks
    for name in ("losses", "norms"):
        mine, ref = row[name], row[f"ref_{name}"]
        rel = tolerance(row[f"noise_{name}"], ref)
        assert len(mine) == len(ref) == 8
        assert math.isclose(mine[0], ref[0], rel_tol=rel), (name, rel, mine, ref)  # the noise
        for a, b in zip(mine, ref, strict=True):
            assert math.isclose(a, b, rel_tol=max(rel, RTOL)), (name, rel, mine, ref)


def _assert_resumes(directory: Path, row: dict, resumed: dict) -> None:
    """The resumed second half: the uninterrupted run's losses, and its final weights."""
    import torch
    from safetensors.torch import load_file

    rel = max(tolerance(row["noise_losses"], row["ref_losses"]), RTOL)
    for a, b in zip(resumed["losses"], row["losses"][4:], strict=True):
        assert math.isclose(a, b, rel_tol=rel), (resumed["losses"], row["losses"])
    final = load_file(str(directory / "final" / "model.safetensors"))
    again = load_file(str(directory / "resumed" / "model.safetensors"))
    assert sorted(final) == sorted(again) and final["lm_head.weight"].shape == (128, 64)
    for name, tensor in final.items():
        torch.testing.assert_close(again[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.distributed
@pytest.mark.slow
def test_cp2_trains_as_one_process_and_resumes_on_one_process(tmp_path: Path) -> None:
    """ParallelismConfig(cp_size=2) with FSDP2 in code, on 2 processes: each attends over
    half of every sequence; the sharded state saved halfway resumes on one process."""
    row = _run(2, "--cp", "2", "--save", str(tmp_path))
    _assert_matches_one_process(row, cp=2)
    assert row["mesh"] == {"dp_shard": 1, "cp": 2}
    resumed = _run(1, "--resume", str(tmp_path))
    assert resumed["strategy"] == "single"
    _assert_resumes(tmp_path, row, resumed)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.extended
def test_cp2_alltoall_trains_as_one_process() -> None:
    """TorchContextParallelConfig(cp_comm_strategy="alltoall"): keys and values pass by
    all-to-all instead of all-gather; the same numbers."""
    _assert_matches_one_process(_run(2, "--cp", "2", "--comm", "alltoall"), cp=2)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.four_processes
@pytest.mark.extended
def test_cp2_times_dp_shard2_trains_as_one_process_and_resumes_on_dp_shard2(
    tmp_path: Path,
) -> None:
    """cp=2 x dp_shard=2 from the launch flags: FSDP2 shards over the 4 processes
    (dp_shard_cp), each pair splits one data-parallel rank's sequences; the state saved
    halfway resumes under FSDP2 on 2 processes without context parallelism."""
    flags = (*FSDP2_FLAGS, "--parallelism_config_cp_size", "2")
    common = ("--batch", "2", "--global_batch", "4")
    row = _run(4, *common, "--save", str(tmp_path), launch_args=flags)
    _assert_matches_one_process(row, cp=2)
    assert row["mesh"] == {"dp_shard": 2, "cp": 2}
    resumed = _run(2, *common, "--resume", str(tmp_path), launch_args=FSDP2_FLAGS)
    assert resumed["layout"]["dp_shard"] == 2 and resumed["layout"]["cp"] == 1
    _assert_resumes(tmp_path, row, resumed)


@pytest.mark.distributed
@pytest.mark.slow
def test_cp2_refuses_a_padding_mask_on_every_process_and_accepts_all_ones() -> None:
    """A padding ``attention_mask`` split with the ids was computed as if unpadded (the loss
    of the all-ones mask). The padding lands in process 0's chunks only: both refuse it
    together (none waits in ring attention for the other)."""
    result = run_launch("cp_padding.py", nprocs=2, timeout=300)
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert [row["rank"] for row in rows] == [0, 1]
    assert rows[0]["all_ones_loss"] == rows[1]["all_ones_loss"]
    assert math.isfinite(rows[0]["all_ones_loss"])
    for row in rows:
        assert "padded_loss" not in row, row
        error = row["padded_error"]
        assert error.startswith("ConfigError: ") and "attention_mask" in error, error
        assert "padding" in error and "label -100" in error, error
