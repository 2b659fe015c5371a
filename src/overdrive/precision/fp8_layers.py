"""Which linear layers fp8 training converts (Hugging Face Accelerate's rules, which the faces
``overdrive/utils/ao.py`` and ``overdrive/compat/fp8_recipes.py`` use): not the first and
last, nor one whose features do not divide by 16."""

from __future__ import annotations

from typing import Any

import torch


def find_first_last_linear_layers(model: torch.nn.Module) -> tuple[str | None, str | None]:
    """The names of the first and last ``nn.Linear`` of ``model`` (in module order), which
    fp8 training keeps in high precision for stability; None where there is none."""
    names = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return (names[0], names[-1]) if names else (None, None)


def filter_linear_layers(module: torch.nn.Module, fqn: str, layers_to_filter: list[Any]) -> bool:
    """Whether to convert ``module`` (named ``fqn``): not if it is a linear whose in or out
    features are not divisible by 16 (fp8 matmuls need it), nor if ``fqn`` is in
    ``layers_to_filter``."""
    if isinstance(module, torch.nn.Linear) and (
        module.in_features % 16 != 0 or module.out_features % 16 != 0
    ):
        return False
    return fqn not in layers_to_filter
