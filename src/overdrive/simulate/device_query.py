"""A fake tensor's device, answered by the first of a simulated rank's modes that meets the
query: PyTorch asks for it (``prim.device``) about once per operator, and each query would
otherwise pass through every mode down to the fake one, for an answer that needs none of
them (a third of a float8 step's dispatches)."""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, _device_handler

_DEVICE = torch.ops.prim.device.default


def fake_device(func: Any, args: Any) -> torch.device | None:
    """The device a fake tensor reports where ``func`` asks ``args[0]`` for it (as the fake
    mode answers it); ``None`` for any other operator."""
    if func is _DEVICE and len(args) == 1 and isinstance(args[0], FakeTensor):
        device: torch.device = _device_handler(args)
        return device
    return None
