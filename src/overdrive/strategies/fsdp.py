"""Fully sharded data parallel: FSDP2 (``fully_shard``) or FSDP1, from ``fsdp_config``, with
tensor parallelism in front when a plan is given: one strategy for the DTensor mesh.

Models go through the parallelize chain (``parallel/chain.py``: tensor parallel -> fill
from the main process -> context parallel -> activation checkpointing -> regional compile ->
FSDP1, FSDP2 or replicate -> compile).
The strategy adds what the loop needs from a sharded model: gradient sync
control, a global gradient norm, full and sharded state dicts.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from overdrive.compile.model import uncompiled
from overdrive.errors import OverdriveError
from overdrive.parallel.chain import Chain, parallelize
from overdrive.parallel.context_parallel import ContextParallelStep
from overdrive.parallel.fill_from_main import BroadcastFromMain, FillFromMain
from overdrive.parallel.fsdp_policy import FSDPPolicy
from overdrive.parallel.grad_norm import clip_grad_norm
from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.meta_init import empty_ranks, is_empty
from overdrive.parallel.placement import Placement
from overdrive.parallel.rebind import rebind
from overdrive.parallel.topology import Topology
from overdrive.parallel.tp_settings import TPSettings
from overdrive.strategies.base import Params, Strategy, _raw
from overdrive.strategies.rules import NO_RULES, LoopRules

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    from overdrive.checkpoint.records import StateDict
    from overdrive.training.accumulation import StepWindow


class FSDPStrategy(Strategy):
    """Shards parameters, gradients and optimizer state over the data-parallel processes."""

    name = "fsdp"
    optimizer_state_by_name = True
    sharded_grads = True

    def __init__(
        self,
        device: torch.device,
        topology: Topology,
        policy: FSDPPolicy,
        tp: TPSettings | None = None,
        *,
        cp: ContextParallelStep | None = None,
        rules: LoopRules = NO_RULES,
    ) -> None:
        super().__init__(device, topology, rules=rules)
        self.cp = cp  # context parallelism over the mesh's ``cp`` dimension
        if tp is not None:
            self.name = "tensor_parallel"  # the same strategy, named for its plan
        self.layout: ParallelLayout = topology.layout
        self.policy = policy
        self.tp = tp  # tensor parallelism over the mesh's ``tp`` dimension, before FSDP
        self.plans: dict[int, dict[str, str]] = {}  # id(root) -> module name -> style
        self._roots: list[nn.Module] = []
        self._replaced: dict[int, nn.Parameter] = {}
        self._optimizers: list[torch.optim.Optimizer] = []
        self._owner: dict[int, nn.Module] = {}  # id(raw optimizer) -> its sharded model
        self.units: dict[int, list[str]] = {}  # id(root) -> module paths of its units

    @property
    def mesh(self) -> DeviceMesh:
        assert self.topology is not None
        return self.topology.mesh

    @property
    def sharded_checkpoints(self) -> bool:
        return self.policy.sharded_checkpoints

    @property
    def loads_in_slices(self) -> bool:
        return True  # a full state dict type still loads each process's shards only

    # --- models and optimizers -------------------------------------------------------
    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        if any(uncompiled(model) in (root, self.unwrap(root)) for root in self._roots):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            return super().setup_model(model, device_placement=device_placement)
        empty = empty_ranks(model)  # processes that built the model on the meta device
        self._say_if_loading_is_not_efficient(empty)
        done = parallelize(model, self.mesh, self._chain(model, bool(empty), device_placement))
        root = uncompiled(done.module)  # the FSDP module, inside the chain's compile step
        self._roots.append(root)
        self.units[id(done.module)] = done.units if self._shards() else []
        if self.tp is not None:
            self.plans[id(done.module)] = done.plan
        self._replaced.update(done.replaced)
        for optimizer in self._optimizers:
            if rebind(optimizer, done.replaced):
                self._owner[id(optimizer)] = root
        return done.module

    def _chain(self, model: nn.Module, empty: bool, device_placement: bool) -> Chain:
        """The parallelize chain for ``model``: the main process's weights broadcast first
        (``sync_module_states``); placed on the device (not when its parameters are
        offloaded); tensor or context parallelism, activation checkpointing, regional
        compile, FSDP1 or FSDP2; when some processes built it ``empty``, filled once wrapped,
        so each process allocates only its part; compile."""
        p = self.policy
        place: Placement | None = None
        if empty and p.version == 1:
            # Every process goes empty; FSDP1 then fills each unit from the main process as it
            # shards it, so no other process ever holds the model.
            place = Placement(torch.device("meta"))
        elif device_placement and not p.offload_params and not is_empty(model):
            place = Placement(self.device)
        # Broadcast in the chain for both versions: FSDP1's own sync refuses CPU modules.
        sync = p.sync_module_states and not empty
        return Chain(
            broadcast=BroadcastFromMain(self.device) if sync else None,
            place=place,
            tp=self.tp,
            cp=self.cp,
            recompute=self.rules.recompute,
            fsdp=p,
            shard=self._shards(),
            fill=FillFromMain.of(model, self.device, per_unit=p.version == 1) if empty else None,
            compile=self.rules.compile,
            device=self.device,
        )

    def _shards(self) -> bool:
        """Whether the wrap step is FSDP's (else tensor parallelism's replication)."""
        return self.policy.version == 1 or self._fsdp_has_work()

    def _fsdp_has_work(self) -> bool:
        """Under tensor parallelism, FSDP2 is applied only when it shards, replicates,
        offloads or casts parameters: with one data-parallel process its per-step copies
        would cost a quarter of a small step, and what the plan left whole is replicated on
        the tp mesh instead."""
        p = self.policy
        if self.tp is None:
            return True
        return self.layout.dp_size > 1 or p.offload_params or p.mixed_precision != "no"

    def _say_if_loading_is_not_efficient(self, empty: list[int]) -> None:
        import torch.distributed as dist

        world = dist.get_world_size() if dist.is_initialized() else 1
        if self.policy.cpu_ram_efficient_loading and world > 1 and not empty and self._is_main():
            warnings.warn(
                "fsdp_cpu_ram_efficient_loading is on, but every process built the whole "
                "model, so none saved memory; build it inside "
                "`with accelerator.cpu_ram_efficient_init():` (transformers' from_pretrained "
                "does this by itself) so only the main process holds the weights",
                UserWarning,
                stacklevel=4,
            )

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        rebind(optimizer, self._replaced)
        self._optimizers.append(optimizer)
        owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for root in self._roots:
            if any(id(p) in owned for p in root.parameters()):
                self._owner[id(optimizer)] = root
        return optimizer

    def unwrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        if isinstance(model, FullyShardedDataParallel):
            model = model.module
        return super().unwrap(model)

    def model_for(self, optimizer: torch.optim.Optimizer) -> nn.Module:
        """The sharded model whose parameters ``optimizer`` steps."""
        root = self._owner.get(id(_raw(optimizer)))
        if root is None:
            raise OverdriveError(
                "this optimizer steps no parameters of a model prepared with FSDP\n"
                "  fix: pass the model and its optimizer to accelerator.prepare()"
            )
        return root

    # --- the step ------------------------------------------------------------------
    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        if hasattr(model, "set_requires_gradient_sync"):
            return _fsdp2_no_sync(cast("FSDPModule", model))
        no_sync = getattr(model, "no_sync", None)
        return no_sync() if callable(no_sync) else contextlib.nullcontext()

    def clip_grad_norm_(
        self,
        parameters: Params,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        window: StepWindow | None,
    ) -> torch.Tensor:
        """Clip by the norm over every shard of every process; return that global norm."""
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if self.tp is not None:
            return clip_grad_norm(params, max_norm, norm_type).to(self.device)
        root = self._fsdp1_root_of(params)
        if root is not None:
            return root.clip_grad_norm_(max_norm, norm_type)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        return _full(norm)

    def _fsdp1_root_of(self, params: list[torch.Tensor]) -> FullyShardedDataParallel | None:
        from torch.distributed.fsdp import FullyShardedDataParallel

        wanted = {id(p) for p in params}
        for root in self._roots:
            if isinstance(root, FullyShardedDataParallel) and any(
                id(p) in wanted for p in root.parameters()
            ):
                return root
        return None

    # --- state dicts ------------------------------------------------------------------
    def _model_state(self, model: nn.Module, sharded: bool) -> StateDict:
        """Sharded: this process's shards as DTensors keyed by the user's names. Whole: the
        full state dict on the main process (an empty dict elsewhere); collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        model = uncompiled(model)  # the user's names, not torch.compile's _orig_mod.
        if sharded:
            return get_model_state_dict(model, options=StateDictOptions(full_state_dict=False))
        if not self._is_root(model):
            return super()._model_state(model, sharded)
        full = get_model_state_dict(model, options=self._full_options())
        return full if self._is_main() else {}

    def _load_model_state(
        self, model: nn.Module, state: StateDict, sharded: bool, strict: bool
    ) -> object:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        model = uncompiled(model)
        if sharded:
            options = StateDictOptions(full_state_dict=False)
        elif not self._is_root(model):
            return super()._load_model_state(model, state, sharded, strict)
        else:
            options = StateDictOptions(full_state_dict=True, strict=strict)
        return set_model_state_dict(model, state, options=options)

    def _optimizer_state(self, optimizer: torch.optim.Optimizer, sharded: bool) -> StateDict:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        model = self.model_for(optimizer)
        if sharded:
            options = StateDictOptions(full_state_dict=False)
            return get_optimizer_state_dict(model, _raw(optimizer), options=options)
        full = get_optimizer_state_dict(model, _raw(optimizer), options=self._full_options())
        return full if self._is_main() else {}

    def _load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, state: StateDict, sharded: bool
    ) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=not sharded)
        set_optimizer_state_dict(self.model_for(optimizer), _raw(optimizer), state, options=options)

    def _full_options(self) -> StateDictOptions:
        """Full state dicts gathered to the main process's CPU memory.

        On a CPU device every process assembles them (FSDP1's offload to the CPU frees
        memory it still reads when the parameters already live there).
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=self.device.type != "cpu")

    @staticmethod
    def _is_main() -> bool:
        import torch.distributed as dist

        return not dist.is_initialized() or dist.get_rank() == 0

    def _is_root(self, model: nn.Module) -> bool:
        return any(model is root for root in self._roots)

    def teardown(self) -> None:
        self._roots.clear()
        self._optimizers.clear()
        self._owner.clear()
        self._replaced.clear()


@contextlib.contextmanager
def _fsdp2_no_sync(model: FSDPModule) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor result (FSDP2's norm) as the plain tensor every process agrees on."""
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else tensor
