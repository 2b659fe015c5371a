"""One fill path: a model that processes other than the main one build empty is filled from
the main process at the same place in the parallelize chain, right after the wrap step,
with tensor parallelism in front or without it (``parallel/chain.py``)."""

from __future__ import annotations

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch


def _rows(*args: str, born_empty: bool = True) -> list[dict]:
    result = run_launch(
        "chain_fill_order.py", nprocs=2, launch_args=["--use_fsdp"], args=list(args)
    )
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert [(r["rank"], r["born_empty"]) for r in rows] == [(0, False), (1, born_empty)]
    return rows


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("args", "steps"),
    [((), ["wrap", "fill"]), (("--tp", "2"), ["split", "wrap", "fill"])],
    ids=["fsdp2", "tp2"],
)
def test_the_empty_process_is_filled_right_after_the_wrap_step(
    args: tuple[str, ...], steps: list[str]
) -> None:
    main, empty = _rows(*args)
    assert empty["events"] == steps
    assert main["events"] == [s for s in steps if s != "fill"]  # nothing to allocate
    assert main["same"] and empty["same"]  # the main process's weights, bitwise


@pytest.mark.distributed
@pytest.mark.extended  # make test keeps the fill order above; these guard the broadcast
@pytest.mark.parametrize("args", [(), ("--tp", "2")], ids=["fsdp2", "tp2"])
def test_sync_module_states_gives_every_process_the_main_process_weights(
    args: tuple[str, ...],
) -> None:
    """The second process builds other weights; the chain's broadcast, before the split,
    overwrites them with the main process's."""
    for row in _rows(*args, "--sync", born_empty=False):
        assert row["same"], row
