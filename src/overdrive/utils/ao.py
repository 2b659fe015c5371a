"""``accelerate.utils.ao``: torchao fp8 helpers (convert a model's linear layers to
``Float8Linear``, choosing which ones)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from overdrive.precision.fp8_layers import filter_linear_layers, find_first_last_linear_layers
from overdrive.utils.imports import torchao_required

__all__ = [
    "convert_model_to_fp8_ao",
    "filter_first_and_last_linear_layers",
    "filter_linear_layers",
    "find_first_last_linear_layers",
    "has_ao_layers",
]


def filter_first_and_last_linear_layers(module: torch.nn.Module, fqn: str) -> bool:
    """``filter_linear_layers`` with ``module``'s own first and last linear layers filtered out.

    torchao calls a filter with each layer, not the model; to skip a model's first and last
    linears, pass ``partial(filter_linear_layers, layers_to_filter=find_first_last_linear_layers(model))``
    (what ``convert_model_to_fp8_ao`` does without a filter).
    """
    return filter_linear_layers(module, fqn, list(find_first_last_linear_layers(module)))


@torchao_required
def has_ao_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds a torchao ``Float8Linear``."""
    from torchao.float8.float8_linear import Float8Linear

    return any(isinstance(module, Float8Linear) for module in model.modules())


@torchao_required
def convert_model_to_fp8_ao(
    model: torch.nn.Module,
    config: Any = None,
    module_filter_func: Callable[[torch.nn.Module, str], bool] | None = None,
) -> None:
    """Swap ``model``'s ``nn.Linear`` layers for torchao's ``Float8Linear``, in place.

    ``config`` is a ``torchao.float8.Float8LinearConfig`` (None: torchao's default);
    ``module_filter_func(module, fqn)`` picks the layers, by default every linear with
    dimensions divisible by 16 except the model's first and last.
    """
    from torchao.float8 import convert_to_float8_training

    if module_filter_func is None:
        ends = list(find_first_last_linear_layers(model))
        module_filter_func = partial(filter_linear_layers, layers_to_filter=ends)
    convert_to_float8_training(model, module_filter_fn=module_filter_func, config=config)
