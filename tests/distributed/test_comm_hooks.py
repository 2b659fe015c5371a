"""DDP communication hooks from DistributedDataParallelKwargs(comm_hook=...) on 2 CPU
processes: the gradient each process gets is the hook's compression of the average, not
the plain average (scripts/comm_hooks.py)."""

from __future__ import annotations

import pytest

from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.errors import ConfigError
from overdrive.strategies.ddp_comm_hooks import _check_runnable
from tests.helpers.dist import assert_ok, result_rows, run_launch


def _rows(hook: str, wrapper: str) -> list[dict]:
    result = run_launch("comm_hooks.py", args=[hook, wrapper])
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert [r["rank"] for r in rows] == [0, 1], result.stdout
    return rows


@pytest.mark.distributed
def test_fp16_compression_gives_the_fp16_rounded_average() -> None:
    for row in _rows("fp16", "no"):
        for step in row["steps"]:
            assert step["ranks_agree"] and step["vs_fp16"] == 0.0, step
            assert 0 < step["vs_mean"] < 1e-3 * step["mean_scale"], step  # compressed, barely


@pytest.mark.distributed
def test_power_sgd_averages_exactly_then_compresses() -> None:
    # start_powerSGD_iter=2: two steps of plain (fp16-wrapped) all-reduce, then rank-1
    # approximations, the same on both processes.
    for row in _rows("power_sgd", "fp16"):
        steps = row["steps"]
        assert all(s["ranks_agree"] for s in steps), steps
        assert [s["vs_fp16"] for s in steps[:2]] == [0.0, 0.0], steps
        assert all(s["vs_mean"] > 1e-2 * s["mean_scale"] for s in steps[2:]), steps


def test_hooks_torch_cannot_run_here_are_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="supports only on CUDA with NCCL") as info:
        _check_runnable(DistributedDataParallelKwargs(comm_hook="bf16"))
    assert "use 'fp16'" in str(info.value)
    batched = DistributedDataParallelKwargs(comm_hook="batched_power_sgd")
    with pytest.raises(ConfigError, match="use comm_hook='power_sgd'"):
        _check_runnable(batched)
