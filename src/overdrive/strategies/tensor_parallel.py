"""Tensor parallelism (DTensor) composed with FSDP2 over the data-parallel processes.

The order is torchtitan's: split the modules over the ``tp`` mesh dimension first, then
``fully_shard`` over the data-parallel sub-mesh: FSDP FULL_SHARD / HYBRID gives 2-D
(dp_shard x tp) or 3-D layouts; without FSDP the data-parallel dimension replicates
(``fully_shard`` on a ``(dp_replicate, dp_shard=1)`` mesh keeps whole copies and averages
gradients, as DDP does). With one data-parallel process there is nothing for FSDP to do
(its per-step copies would cost a quarter of a small step), so it is not applied; the
parameters the plan leaves whole become replicated DTensors on the tp mesh instead, and
the optimizer and clipping still see one kind of tensor.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from overdrive.parallel.activation_checkpointing import apply_activation_checkpointing
from overdrive.parallel.fsdp_policy import FSDPPolicy
from overdrive.parallel.grad_norm import clip_grad_norm
from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.tp import TPSettings, apply_tp
from overdrive.parallel.tp_replicate import replicate_leftovers
from overdrive.strategies.base import Params
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


class TensorParallelStrategy(FSDPStrategy):
    """Splits modules over the tp processes, then shards or replicates over the dp ones."""

    name = "tensor_parallel"

    def __init__(
        self, device: torch.device, layout: ParallelLayout, policy: FSDPPolicy, tp: TPSettings
    ) -> None:
        super().__init__(device, layout, policy)
        self.tp = tp
        self.plans: dict[int, dict[str, str]] = {}  # id(root) -> module name -> style
        self._split_locally = False
        self._fill_source: dict[str, Any] | None = None

    def _place(
        self, model: nn.Module, empty: list[int], device_placement: bool
    ) -> tuple[nn.Module, bool]:
        # The same answer on every process (``empty`` is agreed): either all hold rank 0's
        # weights after this, or some are empty and are filled once split.
        self._split_locally = bool(empty) or self.policy.sync_module_states
        placed, fill_later = super()._place(model, empty, device_placement)
        # An empty model is filled between the split and FSDP (each process then holds
        # its tp part, once): filled after FSDP, the 2-D placements would need FSDP's own
        # strided layout. The main process's full weights are the source.
        self._fill_source = (placed.state_dict() if self._is_main() else {}) if fill_later else None
        return placed, False

    def _shard(self, model: nn.Module) -> nn.Module:
        plan = apply_tp(model, self.mesh["tp"], self.tp, split_locally=self._split_locally)
        if self._fill_source is not None:
            self._fill_from_main(model, self._fill_source)
            self._fill_source = None
        if self._fsdp_has_work():
            wrapped = super()._shard(model)
        else:
            wrapped = self._tp_only(model)
        self.plans[id(wrapped)] = plan
        return wrapped

    def _fsdp_has_work(self) -> bool:
        """FSDP2 is applied when it shards, replicates, offloads or casts parameters."""
        p = self.policy
        return self.layout.dp_size > 1 or p.offload_params or p.mixed_precision != "no"

    def _tp_only(self, model: nn.Module) -> nn.Module:
        if self.policy.activation_checkpointing:
            apply_activation_checkpointing(self._units(model) or [model])
        replicate_leftovers(model, self.mesh["tp"])
        self.units[id(model)] = []
        return model

    def clip_grad_norm_(
        self, parameters: Params, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip by the norm over every shard of every process; return that global norm."""
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        return clip_grad_norm(params, max_norm, norm_type).to(self.device)
