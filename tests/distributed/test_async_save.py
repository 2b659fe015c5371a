"""save_state(async_save=True) under DDP and FSDP (full and sharded state dicts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, run_launch

BACKENDS = {
    "ddp": [],
    "fsdp2-sharded": ["--use_fsdp", "--fsdp_version", "2"]
    + ["--fsdp_state_dict_type", "SHARDED_STATE_DICT"],
    "fsdp1-full": ["--use_fsdp", "--fsdp_version", "1"],
}


@pytest.mark.distributed
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_training_goes_on_while_the_checkpoint_is_written(tmp_path: Path, backend: str) -> None:
    result = run_launch(
        "async_save.py", nprocs=2, launch_args=BACKENDS[backend], args=[str(tmp_path)]
    )
    assert_ok(result)
    assert "ASYNC SAVE OK" in result.stdout
