"""Build a model with its parameters (and optionally buffers) created straight on a device:
the meta device builds a model of any size without memory."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool = False) -> Iterator[None]:
    """Modules created inside register their parameters on ``device`` (keeping each
    parameter's class, ``requires_grad`` and attributes); with ``include_buffers`` every
    tensor created inside is on ``device``."""
    if include_buffers:
        with torch.device(device):
            yield
        return
    original = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is None:
            return
        made: Any = module._parameters[name]  # its class may take fields of its own
        extras = dict(made.__dict__)
        extras["requires_grad"] = param.requires_grad
        initialized = extras.pop("_is_hf_initialized", None)
        moved = type(made)(made.to(device), **extras)
        if initialized is not None:
            moved._is_hf_initialized = initialized
        module._parameters[name] = moved

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def init_empty_weights(include_buffers: bool = False) -> contextlib.AbstractContextManager[None]:
    """Modules created inside hold no memory: parameters (and with ``include_buffers``, every
    tensor) on the meta device."""
    return init_on_device(torch.device("meta"), include_buffers=include_buffers)
