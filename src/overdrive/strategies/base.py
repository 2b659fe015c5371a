"""The Strategy interface: everything a backend does differently, behind one small class.

The Accelerator holds one Strategy and delegates to it; it never asks which backend runs.
A new backend is a new file implementing these methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from overdrive.errors import ConfigError
from overdrive.parallel.chain import Chain, parallelize
from overdrive.parallel.placement import Placement
from overdrive.strategies.rules import NO_RULES, LoopRules
from overdrive.training.optimizer_steps import PlainSteps

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from overdrive.checkpoint.records import StateDict
    from overdrive.parallel.topology import Topology
    from overdrive.precision import Precision
    from overdrive.training.accumulation import GradientState, StepWindow

Params = Iterable[torch.Tensor] | torch.Tensor


@dataclass(frozen=True)
class TrainingLoop:
    """What a strategy reads of the Accelerator's loop while it prepares objects: values taken
    when ``prepare_engine`` is called (a later change of the window's length is told through
    ``Strategy.set_accumulation_steps``)."""

    num_processes: int
    accumulation_steps: int  # gradient_accumulation_steps at this prepare
    # the batch size of each dataloader the Accelerator prepared (this call's included)
    batch_sizes: tuple[int | None, ...] = ()

    @classmethod
    def of(
        cls, num_processes: int, gradient_state: GradientState, loaders: Iterable[object]
    ) -> TrainingLoop:
        """The view of a loop with ``gradient_state`` and these prepared dataloaders."""
        sizes = tuple(getattr(loader, "batch_size", None) for loader in loaders)
        return cls(num_processes, gradient_state.num_steps, sizes)


@dataclass(frozen=True)
class EngineDecision:
    """What ``prepare_engine`` decided, for the Accelerator to apply."""

    # by position in the call: the objects built in place of the given ones
    built: Mapping[int, object] = field(default_factory=dict)
    # the accumulation window the engine imposes (None: the loop's stands)
    accumulation_steps: int | None = None


class Strategy(PlainSteps):
    """The interface, with the plain behaviour (no wrapping, local gradients) as defaults."""

    name = "base"

    def __init__(
        self,
        device: torch.device,
        topology: Topology | None = None,
        *,
        rules: LoopRules = NO_RULES,
    ) -> None:
        self.device = device
        # the layout and its mesh (None: every process its own data-parallel rank)
        self.topology = topology
        self.rules = rules

    # The engine that runs mixed precision (and fp16 loss scaling) itself, by name; None: the
    # Accelerator's precision policy autocasts and scales.
    precision_owner: str | None = None

    # Whether gradients are DTensors spread over processes (FSDP, tensor parallelism): loss
    # scaling then agrees on infs over every process.
    sharded_grads = False

    # Whether every process holds the whole model and optimizer state, so the main process
    # can write a complete checkpoint without the others (save_state from the main process
    # alone, as diffusers' scripts call it).
    state_whole_on_every_process = False

    # Whether save_state may be called inside an accumulation window (the summed gradients
    # are then saved from ``param.grad``); engines that keep them elsewhere say False.
    checkpoints_mid_window = True

    # How this strategy's optimizer state is keyed in checkpoints: by parameter index (a
    # plain optimizer's state_dict), by parameter name (FSDP, TP, PP: what reshards), or
    # None for an engine with a format of its own (DeepSpeed). Loading converts between the
    # first two, so a checkpoint of either kind of layout resumes under the other.
    optimizer_state_by_name: bool | None = False

    # Whether each process's optimizer holds only some of the model's parameters (a pipeline
    # stage's): a state keyed by position cannot say which of its entries are this one's.
    optimizer_holds_a_part = False

    # --- models and optimizers -------------------------------------------------------
    def check_prepare(self, objects: Sequence[object]) -> None:
        """Refuse what this backend cannot prepare, before anything of the call is prepared."""
        for obj in objects:
            _refuse_stand_in(obj, self.name)

    def prepare_engine(
        self, objects: Sequence[object], prepared: Sequence[object], loop: TrainingLoop
    ) -> EngineDecision:
        """Decide what must see several of one ``prepare`` call's objects together, once the
        Accelerator prepared its dataloaders (``prepared``: the call's objects so far).

        Returns the objects built in place of the given ones, by position (on their device
        already), and the accumulation window the engine imposes; the Accelerator applies
        both, then prepares every model, optimizer and scheduler, these instead of the
        originals. Nothing is built together here; an engine that takes the model,
        optimizer, scheduler and batch size at once (DeepSpeed) overrides this."""
        return EngineDecision()

    def model_init_context(self) -> contextlib.AbstractContextManager[object]:
        """Where a model is built so this backend can create it efficiently (nothing here)."""
        return contextlib.nullcontext()

    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        """Run the parallelize chain on ``model``: ``model_chain`` for a model that trains,
        its compile step only for one that does not; placed on the device first when
        asked."""
        chain = self.model_chain() if _trains(model) else Chain(compile=self.rules.compile)
        place = Placement(self.device) if device_placement else None
        return parallelize(model, None, replace(chain, place=place)).module

    def model_chain(self) -> Chain:
        """The parallelize chain for a model that trains: the loop's recomputation and
        compile steps, and this backend's wrap step (none here)."""
        return Chain(recompute=self.rules.recompute, compile=self.rules.compile)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Backend work on the raw optimizer (sharding, offload); identity by default."""
        return optimizer

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module under this backend's and torch.compile's wrappers."""
        while True:
            inner = getattr(model, "module", None) if _is_wrapper(model) else None
            if inner is None:
                inner = getattr(model, "_orig_mod", None)
            if not isinstance(inner, nn.Module):
                return model
            model = inner

    # --- data-parallel coordinates (which data each process reads) -------------------
    # The topology answers; without one every process is its own data-parallel rank.
    def data_parallel_coordinates(self, process_index: int, num_processes: int) -> tuple[int, int]:
        """(rank, size) of this process among those that read different data."""
        if self.topology is None:
            return process_index, num_processes
        return self.topology.dp_coordinates(process_index)

    def data_parallel_ranks(self) -> list[int] | None:
        """One process per data-parallel rank, in that order (None: every process)."""
        return None if self.topology is None else self.topology.data_ranks()

    def data_parallel_group(self) -> ProcessGroup | None:
        """The process group over which data-parallel results are reduced (None: all)."""
        return None if self.topology is None else self.topology.dp_group()

    # --- the step ------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, window: StepWindow, /, **kwargs: object) -> None:
        """``loss.backward`` with the caller's arguments; ``window``: the accumulation window
        at this call (read-only, for a backend that scales losses itself)."""
        backward: Callable[..., None] = loss.backward  # the caller's arguments, as given
        backward(**kwargs)

    def set_accumulation_steps(self, steps: int) -> None:
        """The window's new length, told by the Accelerator when a script changes it after
        ``prepare`` (a strategy that divides losses inside the model's call keeps it)."""
        return None

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip gradient synchronisation inside the block (nothing to skip on one process)."""
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self,
        parameters: Params,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        window: StepWindow | None,
    ) -> torch.Tensor:
        """Clip the gradients' total norm; return the norm before clipping. ``window``: the
        accumulation window at this call (None: the step that closes one), read-only."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Params, clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        precision: Precision,
        closure: Callable[[], float] | None = None,
    ) -> bool:
        """One optimizer step when a window closes (clipped first when the loop's rules
        say so); returns whether it really ran."""
        clip = self.rules.clip_grad_norm
        if clip is not None:
            precision.unscale_(optimizer)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            self.clip_grad_norm_(params, clip, window=None)
        return super().optimizer_step(optimizer, precision, closure)

    # --- state dicts (used by overdrive.checkpoint) -------------------------------------
    def state_dict(
        self, obj: nn.Module | torch.optim.Optimizer, *, sharded: bool = False
    ) -> StateDict:
        """The state of a prepared model or optimizer, keyed by the user's names.

        ``sharded=False``: the whole state (a backend that shards gathers it, collectively,
        onto the main process; others get an empty dict). ``sharded=True``: this process's
        part (DTensors, a pipeline stage's tensors); on a backend that does not shard, every
        process's part is the whole.
        """
        if isinstance(obj, nn.Module):
            return self._model_state(obj, sharded)
        return self._optimizer_state(obj, sharded)

    def load_state_dict(
        self,
        obj: nn.Module | torch.optim.Optimizer,
        state: StateDict,
        *,
        sharded: bool = False,
        strict: bool = True,
    ) -> object:
        """Load ``state`` (as ``state_dict(obj, sharded=sharded)`` returns it) into ``obj``;
        ``strict`` applies to models."""
        if isinstance(obj, nn.Module):
            return self._load_model_state(obj, state, sharded, strict)
        self._load_optimizer_state(obj, state, sharded)
        return None

    # What a backend overrides: one reader and one writer each for models and optimizers.
    def _model_state(self, model: nn.Module, sharded: bool) -> StateDict:
        return self.unwrap(model).state_dict()

    def _load_model_state(
        self, model: nn.Module, state: StateDict, sharded: bool, strict: bool
    ) -> object:
        return self.unwrap(model).load_state_dict(state, strict=strict)

    def _optimizer_state(self, optimizer: torch.optim.Optimizer, sharded: bool) -> StateDict:
        return _raw(optimizer).state_dict()

    def _load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, state: StateDict, sharded: bool
    ) -> None:
        _raw(optimizer).load_state_dict(state)

    # --- which checkpoints a backend writes and reads ---------------------------------
    @property
    def sharded_checkpoints(self) -> bool:
        """True when ``save_state`` should have every process write its own shards."""
        return False

    def checkpoint_names(self) -> dict[int, str]:
        """id(parameter) -> the name checkpoints key it by, where the prepared module's own
        names differ from the user's (a pipeline stage's); empty when they do not."""
        return {}

    @property
    def loads_in_slices(self) -> bool:
        """True when ``load_state`` should read only this process's part of each saved tensor,
        laid out as ``state_dict(model, sharded=True)`` says, whatever ``save_state`` writes."""
        return self.sharded_checkpoints

    def teardown(self) -> None:
        """Release backend resources; the process group belongs to the process state."""
        return None


def _refuse_stand_in(obj: object, backend: str) -> None:
    """Refuse a stand-in for an object another engine builds from its config (DeepSpeed's
    ``DummyOptim``): it says which in ``stands_in_for`` (the backend, what it stands for)."""
    stands_in_for = getattr(type(obj), "stands_in_for", None)
    if stands_in_for is None:
        return
    engine, what = stands_in_for
    raise ConfigError(
        f"prepare() got {type(obj).__name__}, a stand-in for {what}, but the backend is {backend}",
        key="distributed_type",
        fix=f"set distributed_type: {engine} with a config that defines it, or pass a real "
        "torch optimizer/scheduler",
    )


def _raw(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)


def _is_wrapper(model: nn.Module) -> bool:
    return isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel))


def _trains(model: nn.Module) -> bool:
    return any(p.requires_grad for p in model.parameters())
