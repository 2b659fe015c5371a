"""Example FSDP config files (FSDP1 and FSDP2, both wrap-policy spellings) launch and train
on CPU processes, each setting in force."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

CONFIGS = Path(__file__).parent / "configs"
BLOCKS = ["blocks.0", "blocks.1", "blocks.2"]

# config file -> (FSDP version, wrapped units, mixed precision, accumulation, sharded checkpoint)
EXPECTED = {
    "fsdp_full_example.yaml": (1, BLOCKS, "fp16", 4, True),
    "fsdp_large_models.yaml": (1, [], "bf16", 1, False),
    "fsdp_transformer_layer_spelling.yaml": (1, BLOCKS, "bf16", 1, False),
    "fsdp2_example.yaml": (2, BLOCKS, "bf16", 1, True),
}


# The two FSDP1 bf16 files (no sharded checkpoint) run in `make extended`.
IN_MAKE_TEST = {"fsdp_full_example.yaml", "fsdp2_example.yaml"}
RUNS = [c if c in IN_MAKE_TEST else pytest.param(c, marks=pytest.mark.extended) for c in EXPECTED]


@pytest.mark.distributed
@pytest.mark.parametrize("config", RUNS)
def test_fsdp_example_config_trains(config: str) -> None:
    # The files ask for 4 or 8 GPUs; the flag (above the file) makes it a 2-process rehearsal.
    launch_args = ["--config_file", str(CONFIGS / config)]
    result = run_launch("fsdp_example_config.py", nprocs=2, launch_args=launch_args)
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    version, units, precision, accumulation, sharded = EXPECTED[config]
    assert row["type"] == "FSDP" and row["version"] == version
    assert row["units"] == units
    assert (row["mixed_precision"], row["accumulation"]) == (precision, accumulation)
    assert row["sharded"] is sharded  # SHARDED_STATE_DICT: every process wrote its shards
    assert row["last"] < 0.5 * row["first"], row  # it trained
