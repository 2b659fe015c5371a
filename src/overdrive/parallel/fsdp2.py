"""``apply_fsdp2``: shard a model with ``fully_shard`` on a data-parallel mesh."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from torch import nn

from overdrive.parallel.fsdp_policy import FSDPPolicy, param_dtypes

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy


class _ShardOptions(TypedDict, total=False):
    """The keyword arguments every ``fully_shard`` call of a model shares."""

    mesh: DeviceMesh
    mp_policy: MixedPrecisionPolicy
    offload_policy: OffloadPolicy


def apply_fsdp2(
    model: nn.Module, mesh: DeviceMesh, policy: FSDPPolicy, units: list[nn.Module]
) -> nn.Module:
    """``fully_shard`` each unit, innermost first, then the root; returns the root.

    A 2-D mesh ``(dp_replicate, dp_shard)`` gives HSDP (replicate across, shard within).
    NO_SHARD is a mesh with a replicate dimension only, as DDP.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs: _ShardOptions = {"mesh": mesh}
    dtypes = param_dtypes(policy.mixed_precision)
    if dtypes is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtypes[0], reduce_dtype=dtypes[1])
    if policy.offload_params:
        # Pinned host memory speeds copies to a GPU; a CPU rehearsal has no GPU to pin for.
        pin = mesh.device_type == "cuda"
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=pin)
    ordered = _innermost_first(model, units)
    for unit in ordered:
        fully_shard(unit, reshard_after_forward=policy.reshard_after_forward, **kwargs)
    # The root's parameters are needed again at once by backward: never reshard them early.
    fully_shard(model, reshard_after_forward=False, **kwargs)
    if policy.forward_prefetch and len(ordered) > 1:
        in_order = [m for m in model.modules() if any(m is u for u in ordered)]
        for this, following in zip(in_order, in_order[1:]):
            this.set_modules_to_forward_prefetch([following])  # type: ignore[operator]
    return model


def _innermost_first(model: nn.Module, units: list[nn.Module]) -> list[nn.Module]:
    """Units ordered so a nested unit is sharded before the unit that contains it."""
    depth = {id(m): name.count(".") + 1 for name, m in model.named_modules() if name}
    return sorted(units, key=lambda m: -depth.get(id(m), 0))
