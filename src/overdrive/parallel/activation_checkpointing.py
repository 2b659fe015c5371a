"""Recompute the activations of chosen layers in backward instead of keeping them."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from overdrive.errors import ConfigError

_CHECKPOINTED = "_overdrive_checkpointed"
_NO_CACHE_IN_TRAINING = "_overdrive_no_cache_in_training"


def apply_activation_checkpointing(units: Iterable[nn.Module]) -> int:
    """Checkpoint each module's forward in place (parameter names unchanged), once however
    often a model is prepared; returns how many were newly checkpointed.

    Uses PyTorch's composable ``checkpoint``, which adds hooks rather than a wrapper module,
    so state-dict keys stay the user's names.
    """
    from torch.distributed._composable import checkpoint

    count = 0
    for module in units:
        if getattr(module, _CHECKPOINTED, False):
            continue
        checkpoint(module)
        setattr(module, _CHECKPOINTED, True)
        count += 1
    return count


def train_without_kv_cache(model: nn.Module) -> bool:
    """A transformers model with ``config.use_cache`` on, whose layers are recomputed in
    backward, runs its training forwards with ``use_cache=False`` unless a call passes
    ``use_cache`` itself, as transformers does under its own gradient checkpointing. Without
    it each recomputed layer adds its keys and values to the cache a second time, and with
    eager attention the backward fails on mismatched shapes (so does Hugging Face
    Accelerate's FSDP activation checkpointing: transformers issue 34928; with SDPA the
    gradients came out the same here). Evaluation and generation keep the cache.
    Returns whether the model was changed."""
    config = getattr(model, "config", None)
    if getattr(config, "use_cache", None) is not True or getattr(
        model, _NO_CACHE_IN_TRAINING, False
    ):
        return False
    if "use_cache" not in inspect.signature(model.forward).parameters:
        return False

    def no_cache(
        module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if module.training and torch.is_grad_enabled() and kwargs.get("use_cache") is None:
            return args, {**kwargs, "use_cache": False}
        return None

    model.register_forward_pre_hook(no_cache, with_kwargs=True)
    setattr(model, _NO_CACHE_IN_TRAINING, True)
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return True  # said once, by the first process
    warnings.warn(
        f"activation checkpointing: {type(model).__name__}'s training forwards run with "
        "use_cache=False (its config says True), as transformers does under its own gradient "
        "checkpointing: a recomputed layer would fill the cache again, which fails the "
        "backward under eager attention; evaluation and generation keep the cache",
        UserWarning,
        stacklevel=2,
    )
    return True


@dataclass(frozen=True)
class RecomputeLayers:
    """The chain's activation-checkpointing step when ``key`` (Megatron-LM's
    ``recompute_activations``, from ``source``) asks for it: every repeated layer of the
    model recomputes its activations in backward."""

    key: str
    source: str

    def units(self, model: nn.Module) -> list[nn.Module]:
        """The layers of ``model`` to checkpoint (an error naming ``key`` when it has none)."""
        return repeated_layers(model, key=self.key, source=self.source)


def repeated_layers(model: nn.Module, *, key: str, source: str) -> list[nn.Module]:
    """The layers a transformer repeats: the model's ``_no_split_modules`` classes (a
    transformers model), the children of an ``nn.Sequential``, else those of the longest
    ``nn.ModuleList``; an error naming ``key`` when there are none."""
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
