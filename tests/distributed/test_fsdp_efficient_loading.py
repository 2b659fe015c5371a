"""fsdp_cpu_ram_efficient_loading: processes other than the main one never hold the model."""

from __future__ import annotations

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

SCRIPT = "fsdp_efficient_init.py"


# Large allocations straight from mmap, so memory a process frees goes back to the system and
# the peak counts what it holds, not glibc's free lists (which FSDP1's per-unit flattening
# would otherwise fill with freed full-size buffers).
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def _rows(*flags: str) -> list[dict]:
    result = run_launch(SCRIPT, nprocs=2, launch_args=["--use_fsdp", *flags], env=MALLOC)
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert [r["rank"] for r in rows] == [0, 1]
    return rows


@pytest.mark.distributed
def test_only_the_main_process_builds_the_weights_fsdp2() -> None:
    main, other = _rows("--fsdp_version", "2", "--fsdp_cpu_ram_efficient_loading", "true")
    assert not main["was_empty"] and other["was_empty"]
    # the main process held the model; the other holds its half plus one tensor in flight
    assert main["grown_kb"] >= main["model_kb"]
    assert other["grown_kb"] < 0.7 * other["model_kb"], other


@pytest.mark.distributed
def test_without_it_every_process_builds_the_whole_model() -> None:
    for row in _rows("--fsdp_version", "2"):
        assert not row["was_empty"] and row["grown_kb"] >= row["model_kb"]


@pytest.mark.distributed
@pytest.mark.parametrize(
    "wrap", [pytest.param("NO_WRAP", marks=pytest.mark.extended), "SIZE_BASED_WRAP"]
)
def test_only_the_main_process_builds_the_weights_fsdp1(wrap: str) -> None:
    # FSDP1 fills each module from the main process as it shards it: the other process
    # holds its shards plus one unit (one unit: the whole model without wrapping).
    flags = ["--fsdp_version", "1", "--fsdp_cpu_ram_efficient_loading", "true"]
    flags += ["--fsdp_auto_wrap_policy", wrap, "--fsdp_min_num_params", "1000000"]
    main, other = _rows(*flags)
    assert not main["was_empty"] and other["was_empty"]
    assert main["grown_kb"] >= main["model_kb"]
    if wrap == "SIZE_BASED_WRAP":  # 32 units of one layer each
        assert other["grown_kb"] < 0.7 * other["model_kb"], other
