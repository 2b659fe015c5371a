"""Fake tensors for the operator memo, made without ``FakeTensor.__new__``'s Python.

``FakeTensor(mode, meta_tensor, device)`` checks and normalises its arguments and sets a
score of attributes through descriptors: about 9 us a tensor here, against 2 us for what it
amounts to (PyTorch's subclass constructor, the data-pointer guard, the same attributes).
For each fake mode and device the first tensor is made by ``FakeTensor`` itself and a
second one the short way; only if the two agree (their attributes, device, dispatch keys)
does the short way make the others, copying the first one's attributes. A PyTorch whose
``FakeTensor`` differs makes them all the long way.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

_NO_MODES = torch._C._DisableTorchDispatch


class FakeTensorMaker:
    """``make(mode, meta_tensor, device)``: ``FakeTensor(mode, meta_tensor, device)``."""

    def __init__(self) -> None:
        self._attributes: dict[tuple[int, torch.device], dict[str, Any] | None] = {}

    def make(self, mode: FakeTensorMode, elem: torch.Tensor, device: torch.device) -> FakeTensor:
        key = (id(mode), device)  # (the attributes keep the mode alive: no id is reused)
        if key not in self._attributes:
            self._attributes[key] = _attributes_if_alike(mode, device)
        attributes = self._attributes[key]
        if attributes is None:
            return FakeTensor(mode, elem, device)
        return _made(mode, elem, device, attributes)


def _made(
    mode: FakeTensorMode, elem: torch.Tensor, device: torch.device, attributes: dict[str, Any]
) -> FakeTensor:
    tensor: FakeTensor = torch.Tensor._make_subclass(
        FakeTensor, elem, elem.requires_grad, dispatch_device=True, device_for_backend_keys=device
    )
    if mode._allow_unsafe_data_ptr_access:
        torch._C._set_warn_deprecated_on_mutable_data_ptr(tensor)
    else:
        torch._C._set_throw_on_mutable_data_ptr(tensor)
    tensor.__dict__.update(attributes)
    return tensor


def _attributes_if_alike(mode: FakeTensorMode, device: torch.device) -> dict[str, Any] | None:
    """The attributes ``FakeTensor`` gives a tensor of ``mode`` on ``device``, if the short
    way makes the same tensor; else None."""
    with _NO_MODES():
        elems = [torch.empty(2, 3, device="meta") for _ in range(2)]
    made = FakeTensor(mode, elems[0], device)
    attributes = dict(vars(made))
    try:
        again = _made(mode, elems[1], device, attributes)
    except (AttributeError, TypeError, RuntimeError):
        return None
    alike = (
        type(again) is FakeTensor
        and vars(again) == vars(made)
        and again.device == made.device
        and again.requires_grad == made.requires_grad
        and torch._C._dispatch_keys(again) == torch._C._dispatch_keys(made)
    )
    return attributes if alike else None
