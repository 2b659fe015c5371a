"""Tensor parallelism (DTensor) composed with FSDP2 over the data-parallel processes.

The order is torchtitan's: split the modules over the ``tp`` mesh dimension first, then
``fully_shard`` over the data-parallel sub-mesh: FSDP FULL_SHARD / HYBRID gives 2-D
(dp_shard x tp) or 3-D layouts; without FSDP the data-parallel dimension replicates
(``fully_shard`` on a ``(dp_replicate, dp_shard=1)`` mesh keeps whole copies and averages
gradients, as DDP does). With one data-parallel process there is nothing for FSDP to do
(its per-step copies would cost a quarter of a small step), so it is not applied; the
parameters the plan leaves whole become replicated DTensors on the tp mesh instead, and
the optimizer and clipping still see one kind of tensor.

The strategy is ``FSDPStrategy`` given ``TPSettings``; this module holds the two policies it
runs with when FSDP is not asked for.
"""

from __future__ import annotations

from overdrive.parallel.fsdp_policy import FSDPPolicy
from overdrive.strategies.fsdp import FSDPStrategy


def replicate_policy() -> FSDPPolicy:
    """The FSDP2 policy that only replicates (tensor parallelism without FSDP settings).

    Mixed precision stays with the precision plugin (autocast), as under DDP.
    """
    return FSDPPolicy(
        version=2,
        sharding_strategy="NO_SHARD",
        reshard_after_forward=False,
        auto_wrap_policy=None,
        state_dict_type="SHARDED_STATE_DICT",
        sync_module_states=True,
    )


def distributed_optimizer_policy() -> FSDPPolicy:
    """``megatron_lm_config.use_distributed_optimizer``: the data-parallel processes shard
    gradients and optimizer state; each gathers the whole parameters once per step and keeps
    them through backward (FSDP2 SHARD_GRAD_OP over the root alone: ZeRO-2, as Megatron-LM's
    distributed optimizer)."""
    return FSDPPolicy(
        version=2,
        sharding_strategy="SHARD_GRAD_OP",
        reshard_after_forward=False,
        auto_wrap_policy=None,
        state_dict_type="SHARDED_STATE_DICT",
        sync_module_states=True,
    )


# The FSDP strategy with a tensor-parallel plan (it then names itself ``tensor_parallel``):
# the name is kept for code that imports it.
TensorParallelStrategy = FSDPStrategy
