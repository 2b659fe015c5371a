"""``init_empty_weights`` with the described system's signature."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from overdrive.parallel import meta_init


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Modules created inside get their parameters on the meta device (no memory).

    Buffers stay real unless ``include_buffers=True`` (then every tensor is empty), as in
    the described system.
    """
    if include_buffers:
        with meta_init.init_empty_weights():
            yield
        return
    original = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: Any) -> None:
        original(module, name, param)
        if param is not None:
            meta = param.detach().to(torch.device("meta"))
            module._parameters[name] = type(param)(meta, requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]
