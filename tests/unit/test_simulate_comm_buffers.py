"""The memory report's communication-buffer line: which tensors a ``torch.distributed`` call
moves into it (``overdrive.simulate.comm_buffers``), on a fake process group of two ranks,
under the tracker a simulated rank uses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from overdrive.simulate.comm_buffers import BUFFER_ARGUMENTS
from overdrive.simulate.comms import KINDS
from overdrive.simulate.fake_world import fake_world
from overdrive.simulate.peak import PeakTracker, _by_kind

FLOATS = 1024
BYTES = FLOATS * 4


def _now(tracker: PeakTracker) -> dict[str, int]:
    return _by_kind(tracker.get_tracker_snapshot())


@contextmanager
def _tracked_rank(forward_first: bool = True) -> Iterator[tuple[PeakTracker, torch.nn.Linear]]:
    """Rank 0 of a fake world of 2 under the peak tracker, a small model's forward run first
    (from which on buffers are counted) unless ``forward_first`` is false."""
    with fake_world(0, 2):
        tracker = PeakTracker()
        with tracker:
            model = torch.nn.Linear(FLOATS, 1, bias=False)
            if forward_first:
                model(torch.zeros(1, FLOATS))
            yield tracker, model
        tracker.close()


def _communication_after(call: Callable[[], object], forward_first: bool = True) -> int:
    with _tracked_rank(forward_first) as (tracker, _):
        kept = call()  # noqa: F841  (its tensors stay alive while the tracker is read)
        return _now(tracker).get("Communication", 0)


def test_an_all_reduce_buffer_counts_until_freed() -> None:
    with _tracked_rank() as (tracker, _):
        buffer = torch.ones(FLOATS)
        before = _now(tracker)
        dist.all_reduce(buffer)
        during = _now(tracker)
        del buffer
        after = _now(tracker)
    assert before["Communication"] == 0
    assert during["Communication"] == BYTES
    assert during["Activation"] == before["Activation"] - BYTES  # moved, not added
    assert during["Total"] == before["Total"]
    assert after["Communication"] == 0


def test_an_all_gather_counts_its_input_and_output() -> None:
    def gather() -> tuple[torch.Tensor, torch.Tensor]:
        piece, whole = torch.ones(FLOATS), torch.empty(2 * FLOATS)
        dist.all_gather_into_tensor(whole, piece)
        return piece, whole

    assert _communication_after(gather) == 3 * BYTES


def test_a_reduce_scatter_counts_its_input_not_its_share() -> None:
    def reduce_scatter() -> tuple[torch.Tensor, torch.Tensor]:
        share, whole = torch.empty(FLOATS), torch.ones(2 * FLOATS)
        dist.reduce_scatter_tensor(share, whole)
        return share, whole

    assert _communication_after(reduce_scatter) == 2 * BYTES


def test_a_send_and_a_functional_collective_count_nothing() -> None:
    def send() -> torch.Tensor:
        sent = torch.ones(FLOATS)
        dist.send(sent, dst=1)
        return sent

    def functional_all_reduce() -> tuple[torch.Tensor, torch.Tensor]:
        from torch.distributed._functional_collectives import all_reduce

        value = torch.ones(FLOATS)
        return value, all_reduce(value, "sum", dist.group.WORLD)

    assert _communication_after(send) == 0
    assert _communication_after(functional_all_reduce) == 0


def test_a_received_buffer_counts() -> None:
    def receive() -> torch.Tensor:
        received = torch.empty(FLOATS)
        dist.recv(received, src=1)
        return received

    assert _communication_after(receive) == BYTES


def test_a_parameter_reduced_in_place_stays_a_parameter() -> None:
    with _tracked_rank() as (tracker, model):
        dist.all_reduce(model.weight.data)
        now = _now(tracker)
    assert now["Communication"] == 0
    assert now["Parameter"] == BYTES


def test_nothing_counts_before_the_first_forward() -> None:
    def broadcast() -> torch.Tensor:
        state = torch.ones(FLOATS)
        dist.broadcast(state, src=0)
        return state

    assert _communication_after(broadcast, forward_first=False) == 0
    assert _communication_after(broadcast) == BYTES


def test_every_buffer_operator_is_a_counted_collective_of_this_torch() -> None:
    # a misspelt or renamed operator would silently never count
    for name in BUFFER_ARGUMENTS:
        assert hasattr(torch.ops.c10d, name), name
        assert name in KINDS, name
