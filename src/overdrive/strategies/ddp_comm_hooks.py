"""DDP gradient communication hooks chosen by ``DistributedDataParallelKwargs(comm_hook=...)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch.nn.parallel import DistributedDataParallel

from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.errors import ConfigError

if TYPE_CHECKING:
    import torch


def register_comm_hook(
    model: DistributedDataParallel, kwargs: DistributedDataParallelKwargs
) -> None:
    """Register the hook ``kwargs`` names on ``model`` (nothing for ``comm_hook="no"``)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    name = kwargs.comm_hook
    if name == "no":
        return
    _check_runnable(kwargs)
    state: object = None
    hook: Callable[..., torch.futures.Future[torch.Tensor]]
    if name == "fp16":
        hook = default_hooks.fp16_compress_hook
    elif name == "bf16":
        hook = default_hooks.bf16_compress_hook
    else:
        state = powerSGD_hook.PowerSGDState(process_group=None, **kwargs.comm_state_option)
        hook = (
            powerSGD_hook.powerSGD_hook
            if name == "power_sgd"
            else powerSGD_hook.batched_powerSGD_hook
        )
        if kwargs.comm_wrapper == "fp16":
            hook = default_hooks.fp16_compress_wrapper(hook)
        elif kwargs.comm_wrapper == "bf16":
            hook = default_hooks.bf16_compress_wrapper(hook)
    model.register_comm_hook(state=state, hook=hook)


def _check_runnable(kwargs: DistributedDataParallelKwargs) -> None:
    """Refuse, with the fix, a hook that torch would reject (or crash in) mid-backward."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    source = "code: DistributedDataParallelKwargs(...)"
    backend = dist.get_backend() if dist.is_initialized() else "none"
    for field_name in ("comm_hook", "comm_wrapper"):
        if getattr(kwargs, field_name) == "bf16" and backend != "nccl":
            raise ConfigError(
                f"{field_name}='bf16' ({source}) compresses gradients to bfloat16, which torch "
                f"supports only on CUDA with NCCL; this run's process group is {backend}",
                key=field_name,
                fix="use 'fp16' compression (works on gloo and nccl), or run on GPUs",
            )
    if kwargs.comm_hook == "batched_power_sgd":
        try:
            powerSGD_hook._orthogonalize(torch.ones(2, 1))
        except AssertionError:
            raise ConfigError(
                f"comm_hook='batched_power_sgd' ({source}) fails in torch {torch.__version__}: "
                "its hook passes a 2-D matrix to an orthogonalisation that takes only batches "
                "of matrices, so the first compressed step would stop with an AssertionError",
                key="comm_hook",
                fix="use comm_hook='power_sgd' (the same compression, one matrix per tensor)",
            ) from None
