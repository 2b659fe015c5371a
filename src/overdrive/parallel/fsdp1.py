"""``apply_fsdp1``: wrap a model with ``FullyShardedDataParallel`` on a data-parallel mesh."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from overdrive.parallel.fsdp_policy import FSDPPolicy, param_dtypes

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def apply_fsdp1(
    model: nn.Module,
    mesh: DeviceMesh,
    policy: FSDPPolicy,
    units: list[nn.Module],
    device: torch.device,
    *,
    param_init_fn: Any = None,
) -> nn.Module:
    """Wrap ``model`` (and each unit, through a custom wrap policy) with FSDP1.

    The mesh makes sharded state dicts DTensors, as under FSDP2, so checkpoints of both
    versions share one format. ``param_init_fn`` (a meta-device model) fills each module as
    its unit is sharded.
    """
    from torch.distributed.fsdp import (
        BackwardPrefetch,
        CPUOffload,
        MixedPrecision,
        ShardingStrategy,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import CustomPolicy

    wanted = {id(u) for u in units}
    kwargs: dict[str, Any] = {
        "device_mesh": mesh,
        "sharding_strategy": ShardingStrategy[policy.sharding_strategy],
        "use_orig_params": policy.use_orig_params,
        "sync_module_states": False,  # the strategy broadcasts rank 0's states itself
        "forward_prefetch": policy.forward_prefetch,
        "backward_prefetch": None
        if policy.backward_prefetch == "NO_PREFETCH"
        else BackwardPrefetch[policy.backward_prefetch],
        "device_id": device,
    }
    if param_init_fn is not None:
        kwargs["param_init_fn"] = param_init_fn
    if units:
        kwargs["auto_wrap_policy"] = CustomPolicy(lambda module: id(module) in wanted)
    if policy.offload_params and device.type != "cpu":
        # On a CPU rehearsal the parameters already live on the CPU; FSDP1's offload would
        # only add pinning, which needs a GPU.
        kwargs["cpu_offload"] = CPUOffload(offload_params=True)
    dtypes = param_dtypes(policy.mixed_precision)
    if dtypes is not None:
        kwargs["mixed_precision"] = MixedPrecision(param_dtype=dtypes[0], reduce_dtype=dtypes[1])
    return FSDP(model, **kwargs)
