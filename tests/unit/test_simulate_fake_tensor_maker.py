"""The operator memo's fake tensors (``overdrive.simulate.fake_tensor_maker``): made the
short way they are what ``FakeTensor(mode, meta_tensor, device)`` makes; where the short way
does not agree with it, every tensor is made by ``FakeTensor`` itself."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from overdrive.simulate import fake_tensor_maker
from overdrive.simulate.fake_tensor_maker import FakeTensorMaker


def _meta(requires_grad: bool = False) -> torch.Tensor:
    with torch._C._DisableTorchDispatch():
        return torch.empty_strided((4, 3), (1, 4), device="meta", requires_grad=requires_grad)


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_made_tensor_is_what_fake_tensor_makes(device: str, requires_grad: bool) -> None:
    mode, where = FakeTensorMode(), torch.device(device)
    expected = FakeTensor(mode, _meta(requires_grad), where)
    maker = FakeTensorMaker()
    maker.make(mode, _meta(), where)  # the first, by FakeTensor itself
    with patch.object(FakeTensor, "__new__", side_effect=AssertionError("the long way")):
        made = maker.make(mode, _meta(requires_grad), where)
    assert type(made) is FakeTensor and vars(made) == vars(expected)
    assert (made.device, made.shape, made.stride(), made.requires_grad) == (
        expected.device,
        expected.shape,
        expected.stride(),
        expected.requires_grad,
    )
    assert torch._C._dispatch_keys(made) == torch._C._dispatch_keys(expected)
    if where.type == "cpu":  # and it computes as a fake tensor of the mode (autograd on a
        with mode:  # fake cuda tensor needs CUDA, which this machine may lack)
            assert isinstance(made * 2, FakeTensor)


def test_where_the_short_way_disagrees_every_tensor_is_made_the_long_way() -> None:
    mode, where = FakeTensorMode(), torch.device("cpu")
    maker = FakeTensorMaker()
    with patch.object(fake_tensor_maker, "_made", side_effect=TypeError("another PyTorch")):
        first = maker.make(mode, _meta(), where)
    second = maker.make(mode, _meta(), where)
    assert type(first) is type(second) is FakeTensor and second.fake_mode is mode
    with patch.object(fake_tensor_maker, "_made", side_effect=AssertionError("short way")):
        maker.make(mode, _meta(), where)  # remembered: no short way for this mode and device
