"""DDP gradient communication hooks chosen by ``DistributedDataParallelKwargs(comm_hook=...)``."""

from __future__ import annotations

from typing import Any

from torch.nn.parallel import DistributedDataParallel

from overdrive.kwargs_handlers import DistributedDataParallelKwargs


def register_comm_hook(
    model: DistributedDataParallel, kwargs: DistributedDataParallelKwargs
) -> None:
    """Register the hook ``kwargs`` names on ``model`` (nothing for ``comm_hook="no"``)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    name = kwargs.comm_hook
    if name == "no":
        return
    state: Any = None
    if name == "fp16":
        hook: Any = default_hooks.fp16_compress_hook
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
