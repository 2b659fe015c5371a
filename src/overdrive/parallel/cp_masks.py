"""Attention masks inside a context-parallel block: ring attention computes causal attention
and takes no mask, so a mask may be dropped only when it asks for nothing more than that.

A padding mask (a ``(batch, sequence)`` ``attention_mask`` with zeros) given to a model in
the block, or a mask reaching an attention module that is stricter than causal, is refused.
The padding lands in some processes' chunks and not others', so the processes first agree
(a max over the ``cp`` group) and every one of them refuses together: none is left waiting in
ring attention for a process that stopped.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch
from torch import nn

from overdrive.errors import ConfigError
from overdrive.parallel.cp_rules import CP_KEY

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

FIX = (
    "pad on the right and give the padded positions the label -100 (the loss's "
    "ignore_index), then call the model without attention_mask inside the block: causal "
    "attention never lets a token see the padding after it; or pack the sequences so none "
    f"needs padding, or set {CP_KEY} to 1"
)


def _allowed(mask: torch.Tensor) -> torch.Tensor:
    """Where a mask as ``scaled_dot_product_attention`` takes it lets attention through."""
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        return mask == 0  # an additive mask
    return mask != 0


def asks_no_more_than_causal(mask: torch.Tensor) -> bool:
    """Whether a ``(..., query, key)`` attention mask allows everything, or exactly what
    causal attention does."""
    allowed = _allowed(mask)
    if bool(allowed.all()):
        return True
    if allowed.dim() < 2 or allowed.shape[-1] != allowed.shape[-2]:
        return False
    n = allowed.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=allowed.device).tril()
    return bool((allowed == causal).all())


def any_process(flag: bool, mesh: DeviceMesh | None, device: torch.device) -> bool:
    """Whether ``flag`` holds on any process of the ``cp`` group (each calls the model, and
    each attention module, alike, so each reaches this)."""
    import torch.distributed as dist

    if mesh is None or not dist.is_available() or not dist.is_initialized():
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=mesh.get_group())
    return bool(value.item())


def _argument(
    module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object], name: str
) -> object:
    if name in kwargs:
        return kwargs[name]
    if not args:
        return None
    try:
        return inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments.get(name)
    except (TypeError, ValueError):
        return None


def refuse_padding(
    module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object], mesh: DeviceMesh | None
) -> None:
    """Refuse a model's ``attention_mask`` argument that masks more than causal attention
    does (padding), on every process of the block together."""
    mask = _argument(module, args, kwargs, "attention_mask")
    if not isinstance(mask, torch.Tensor):
        return
    padded = (
        not bool(_allowed(mask).all()) if mask.dim() == 2 else not asks_no_more_than_causal(mask)
    )
    if any_process(padded, mesh, mask.device):
        raise ConfigError(
            f"{type(module).__name__} was given an attention_mask that masks tokens out "
            "(padding) inside maybe_context_parallel; ring attention computes causal "
            "attention without a mask, so the padded positions would be attended as tokens",
            key="attention_mask",
            fix=FIX,
        )


def refuse_strict_mask(mask: object, name: str, mesh: DeviceMesh | None) -> None:
    """Refuse a mask reaching attention module ``name`` in the block unless dropping it
    changes nothing (it allows everything, or exactly causal attention)."""
    if not isinstance(mask, torch.Tensor):
        return
    if any_process(not asks_no_more_than_causal(mask), mesh, mask.device):
        raise ConfigError(
            f"the attention module {name} got a mask stricter than causal inside "
            "maybe_context_parallel; ring attention computes causal attention without a "
            "mask, and would ignore it",
            key="attention_mask",
            fix=FIX,
        )
