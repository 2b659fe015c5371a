"""Pipeline-parallel inference (``prepare_pippy``) on two CPU processes: the pipelined forward
gives the plain model's output; and Hugging Face Accelerate's FSDP2 helpers called by hand
(``fsdp2_prepare_model``, ``fsdp2_switch_optimizer_parameters``, ``fsdp2_load_full_state_dict``)
on two processes."""

from __future__ import annotations

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

TOL = 1e-6


@pytest.mark.distributed
def test_the_pipelined_forward_equals_the_plain_model() -> None:
    result = run_launch("pippy_inference.py", nprocs=2, timeout=300)
    assert_ok(result)
    first, last = result_rows(result.stdout)
    # "auto" cuts the model in two halves of about equal size: embed + layers 0-1 | 2-3 + head.
    assert first["auto_points"] == last["auto_points"] == ["layers.2"]
    # Only the last stage gets the output; batch 3 comes back with 3 rows (its padding row
    # off), and batch 6 (micro-batches of 3, not the traced 2) was traced anew, not hung.
    assert first["diffs"] == {"4": None, "3": None, "6": None}
    assert all(d is not None and d < TOL for d in last["diffs"].values()), last["diffs"]
    assert first["traced"] == last["traced"] == 2
    # Keyword inputs, one read only by the last stage, and the output sent to every process.
    assert first["gathered"] is not None and first["gathered"] < TOL
    assert last["gathered"] is not None and last["gathered"] < TOL


@pytest.mark.distributed
def test_fsdp2_helpers_shard_repoint_and_fill_across_processes() -> None:
    flags = ["--use_fsdp", "--fsdp_version", "2", "--fsdp_transformer_layer_cls_to_wrap", "Block"]
    result = run_launch("fsdp_utils_helpers.py", nprocs=2, launch_args=flags, timeout=300)
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert len(rows) == 2
    for row in rows:
        assert row["again"] and row["switched"] and row["stepped"], row
        assert row["local"] * 2 == row["total"]  # each process holds half of the parameters
        assert row["prepared_diff"] < TOL
        # Filled from the main process alone, every process holds the reference values.
        assert row["loaded_diff"] == 0.0 and row["filled_diff"] < TOL
        assert "head.bias" in row["refused"]
