"""Small DeepSpeed pieces Hugging Face Accelerate users call directly: a wrapper that gives a
DeepSpeed engine an ordinary loop's ``backward``, DeepSpeed's CPU version of a torch optimizer
(for ZeRO-Offload), and gathering ZeRO-3 partitioned parameters for a block of code.

Imports DeepSpeed only when called (``overdrive.utils.deepspeed`` exposes these).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Iterable, Iterator
from typing import cast

import torch

from overdrive.ds.engine import DeepSpeedEngine


class DeepSpeedEngineWrapper:
    """A DeepSpeed engine driven by a plain loop: ``backward`` runs the engine's backward and,
    at the end of an accumulation window (``sync_gradients``), its step, which clips, steps
    the optimizer and scheduler and zeroes the gradients."""

    def __init__(self, engine: DeepSpeedEngine) -> None:
        self.engine = engine

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: object) -> None:
        """Backward through the engine; a window's last micro-batch also steps it."""
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    def get_global_grad_norm(self) -> float | None:
        """The gradient norm of the last step over every process, as a number when it is a
        tensor (None before a step)."""
        norm = self.engine.get_global_grad_norm()
        if hasattr(norm, "item"):
            return cast(torch.Tensor, norm).item()
        return norm


def _version_at_least(distribution: str, floor: str) -> bool:
    from torch.torch_version import TorchVersion

    try:
        return TorchVersion(importlib.metadata.version(distribution)) >= floor
    except importlib.metadata.PackageNotFoundError:
        return False


def _bnb_32bit(optimizer: object, names: tuple[str, ...]) -> bool:
    """``optimizer`` is one of bitsandbytes' ``names`` optimizers running in 32 bits."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return False
    import bitsandbytes.optim as bnb_optim

    kinds = tuple(getattr(bnb_optim, name) for name in names if hasattr(bnb_optim, name))
    if not kinds or not isinstance(optimizer, kinds):
        return False
    bits = getattr(optimizer, "optim_bits", None)
    if bits is None:
        bits = optimizer.args.optim_bits
    return bool(bits == 32)


def map_pytorch_optim_to_deepspeed(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """DeepSpeed's CPU optimizer for ``optimizer``'s parameter groups, as ZeRO-Offload needs:
    ``DeepSpeedCPUAdagrad`` for Adagrad, ``DeepSpeedCPULion`` for bitsandbytes' 32-bit Lion,
    ``DeepSpeedCPUAdam`` otherwise (in AdamW mode for AdamW). ``lr`` and ``weight_decay`` come
    from the optimizer's defaults; the groups keep their own values."""
    defaults = {k: v for k, v in optimizer.defaults.items() if k in ("lr", "weight_decay")}
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    optimizer_class: Callable[..., torch.optim.Optimizer] = DeepSpeedCPUAdam
    if _version_at_least("deepspeed", "0.3.1"):
        adamw = isinstance(optimizer, torch.optim.AdamW) or _bnb_32bit(
            optimizer, ("AdamW", "AdamW32bit")
        )
        defaults["adamw_mode"] = adamw
    if _version_at_least("deepspeed", "0.5.5") and (
        isinstance(optimizer, torch.optim.Adagrad)
        or _bnb_32bit(optimizer, ("Adagrad", "Adagrad32bit"))
    ):
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad

        optimizer_class = DeepSpeedCPUAdagrad
    if (
        _version_at_least("bitsandbytes", "0.38.0")
        and _version_at_least("deepspeed", "0.11.0")
        and _bnb_32bit(optimizer, ("Lion", "Lion32bit"))
    ):
        from deepspeed.ops.lion import DeepSpeedCPULion

        optimizer_class = DeepSpeedCPULion
    return optimizer_class(optimizer.param_groups, **defaults)


def _partitioned(params: torch.Tensor | Iterable[torch.Tensor] | None) -> bool:
    items = [params] if isinstance(params, torch.Tensor) else list(params or ())
    return any(hasattr(p, "ds_id") for p in items)


@contextlib.contextmanager
def gathered_parameters(
    params: Iterable[torch.Tensor] | torch.Tensor,
    modifier_rank: int | None = None,
    fwd_module: torch.nn.Module | None = None,
    enabled: bool = True,
) -> Iterator[None]:
    """``deepspeed.zero.GatheredParameters`` over ``params`` when ZeRO-3 partitions them;
    nothing otherwise (plain parameters are already whole)."""
    if not isinstance(params, torch.Tensor):
        params = list(params)
    if not _partitioned(params):
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(
        params, modifier_rank=modifier_rank, fwd_module=fwd_module, enabled=enabled
    ):
        yield
