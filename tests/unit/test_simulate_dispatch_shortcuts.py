"""The two shortcuts on a simulated rank's per-operator path: a fake tensor's device query
answered by the first mode that meets it (``overdrive.simulate.device_query``), and the peak
tracker's own walk over an operator's outputs (``PeakTracker.__torch_dispatch__``), which
must still count every tensor an operator returns, in tuples and lists too."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from overdrive.simulate.device_query import fake_device
from overdrive.simulate.fake_world import SimulatedRank, fake_world
from overdrive.simulate.peak import PeakTracker, _by_kind

DEVICE = torch.ops.prim.device.default


def test_a_fake_tensors_device_is_the_one_the_fake_mode_reports() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        on_meta_device = mode.from_tensor(torch.zeros(2, device="meta"))
        on_cpu = torch.zeros(3)
    assert fake_device(DEVICE, (on_cpu,)) == torch.device("cpu")
    assert fake_device(DEVICE, (on_meta_device,)) == torch.device("meta")


def test_other_operators_and_real_tensors_are_left_to_the_modes_below() -> None:
    with FakeTensorMode():
        fake = torch.zeros(3)
    assert fake_device(torch.ops.aten.abs.default, (fake,)) is None
    assert fake_device(DEVICE, (torch.zeros(3),)) is None


def test_device_queries_under_a_simulated_rank_give_the_fake_devices() -> None:
    counter = SimulatedRank()
    with fake_world(0, 2), counter:
        tensor = torch.ones(4, 4)
        tracker = PeakTracker()
        with tracker:
            moved = tensor.to("meta")
            product = tensor @ tensor
        tracker.close()
    assert (tensor.device, moved.device, product.device) == (
        torch.device("cpu"),
        torch.device("meta"),
        torch.device("cpu"),
    )
    assert counter.flops == 2 * 4 * 4 * 4  # the product still reached the counter


def _activation_bytes(tracker: PeakTracker) -> int:
    return _by_kind(tracker.get_tracker_snapshot()).get("Activation", 0)


def test_every_tensor_an_operator_returns_is_tracked() -> None:
    tracker = PeakTracker()
    with tracker:
        first, second = torch.ones(256), torch.ones(512)
        before = _activation_bytes(tracker)
        values, indices = torch.sort(first)  # a tuple: float32 values, int64 indices
        after_tuple = _activation_bytes(tracker)
        summed = torch._foreach_add([first, second], 1.0)  # a list
        after_list = _activation_bytes(tracker)
    tracker.close()
    assert after_tuple - before == values.nbytes + indices.nbytes == 256 * 4 + 256 * 8
    assert after_list - after_tuple == sum(t.nbytes for t in summed) == (256 + 512) * 4
