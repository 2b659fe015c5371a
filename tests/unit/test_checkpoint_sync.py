"""The all-ranks-or-error rendezvous behind save_state/load_state, two ranks on one store."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch.distributed as dist

from overdrive.checkpoint import CheckpointError, CollectiveTimeoutError
from overdrive.checkpoint.sync import Rendezvous


def _pair(op: str = "save_state") -> tuple[Rendezvous, Rendezvous]:
    """Rank 0's and rank 1's view of the same collective call."""
    store = dist.HashStore()
    zero, one = (Rendezvous(op, rank=r, world_size=2, timeout=0.3, store=store) for r in (0, 1))
    one.prefix = zero.prefix  # in a real run every rank counts the same calls
    return zero, one


def test_one_rank_alone_fails_naming_the_missing_one() -> None:
    zero, _ = _pair()
    with pytest.raises(
        CollectiveTimeoutError, match=r"process\(es\) \[1\] did not call save_state"
    ):
        zero.arrive()


def test_main_process_commits_only_after_every_rank_wrote() -> None:
    zero, one = _pair()
    zero.store.set(f"{one.prefix}/arrive/1", "1")
    zero.arrive()
    # Rank 1 never reports its files (killed): rank 0 must not go on to commit.
    with pytest.raises(CollectiveTimeoutError, match=r"\[1\] did not finish write"):
        zero.done("write")
    zero, one = _pair()
    assert one.done("write", "OSError: disk full") == []
    assert zero.done("write") == ["process 1: OSError: disk full"]


def test_rank_0_failure_reaches_the_others() -> None:
    zero, one = _pair("load_state")
    zero.share("path", "no such checkpoint", failed=True)
    with pytest.raises(CheckpointError, match="load_state failed on process 0: no such"):
        one.share("path")
    zero, one = _pair()
    zero.share("target", "1/ckpt")
    assert one.share("target") == "1/ckpt"


def test_single_process_needs_no_store() -> None:
    rv = Rendezvous("save_state", rank=0, world_size=1)
    assert not rv.active and rv.timeout == timedelta(minutes=30)
    rv.arrive()
    assert rv.done("write") == [] and rv.share("final", "x") == "x"


def test_decide_hands_rank_0s_value_or_its_failure_to_everyone() -> None:
    zero, one = _pair("load_state")
    assert zero.decide("path", lambda: "ckpt_3") == "ckpt_3"
    assert one.decide("path", lambda: pytest.fail("only rank 0 computes")) == "ckpt_3"

    def missing() -> str:
        raise FileNotFoundError("no checkpoint under runs/")

    zero, one = _pair("load_state")
    with pytest.raises(FileNotFoundError):
        zero.decide("path", missing)
    with pytest.raises(CheckpointError, match="failed on process 0: no checkpoint under runs/"):
        one.decide("path", missing)
