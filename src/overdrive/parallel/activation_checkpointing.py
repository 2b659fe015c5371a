"""Recompute the activations of chosen layers in backward instead of keeping them."""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn


def apply_activation_checkpointing(units: Iterable[nn.Module]) -> int:
    """Checkpoint each module's forward in place (parameter names unchanged); returns the count.

    Uses PyTorch's composable ``checkpoint``, which adds hooks rather than a wrapper module,
    so state-dict keys stay the user's names.
    """
    from torch.distributed._composable import checkpoint

    count = 0
    for module in units:
        checkpoint(module)
        count += 1
    return count


def repeated_layers(model: nn.Module, *, key: str, source: str) -> list[nn.Module]:
    """The layers a transformer repeats: the model's ``_no_split_modules`` classes (a
    transformers model), the children of an ``nn.Sequential``, else those of the longest
    ``nn.ModuleList``; an error naming ``key`` when there are none."""
    from overdrive.errors import ConfigError

    classes = set(getattr(model, "_no_split_modules", None) or ())
    found = [m for m in model.modules() if m is not model and type(m).__name__ in classes]
    if found:
        return found
    if isinstance(model, nn.Sequential) and len(model) > 1:
        return list(model)
    lists = [list(m) for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 1]
    if lists:
        return max(lists, key=len)
    raise ConfigError(
        f"{key} (from {source}) recomputes each repeated layer's activations, and "
        f"{type(model).__name__} has no layers to find: no _no_split_modules, not an "
        "nn.Sequential, no nn.ModuleList",
        key=key,
        fix=f"keep the layers in an nn.ModuleList (or an nn.Sequential), or turn {key} off",
    )
