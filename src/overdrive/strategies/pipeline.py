"""Pipeline parallelism with ``torch.distributed.pipelining``, behind the ordinary loop.

Each process keeps one stage of the model (``parallel/pipeline.py``). Calling the prepared
model runs a whole schedule (GPipe or 1F1B over ``num_micro_batches`` micro-batches): the
forward passes and, when training, the backward passes too, since a pipeline interleaves
them. The call returns an output whose ``.loss`` is the batch's loss on every process
(computed on the last stage, the mean over equal micro-batches, sent to the other stages
by ``LossChannel``); ``accelerator.backward(loss)`` then has nothing left to do.
Data-parallel replicas of the pipeline average their gradients right after the schedule
(once per accumulation window).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from overdrive.checkpoint.pipeline_stage import (
    load_stage_optimizer,
    load_whole_optimizer,
    stage_model_state,
    stage_optimizer_state,
    whole_model_state,
    whole_optimizer_state,
)
from overdrive.errors import OverdriveError
from overdrive.parallel.chain import Chain, parallelize
from overdrive.parallel.fill_from_main import BroadcastFromMain
from overdrive.parallel.grad_norm import total_norm
from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.mesh import groups_along
from overdrive.parallel.pipeline import LossFn, PipelineSplit, Stage
from overdrive.parallel.pipeline_loss import LossChannel
from overdrive.parallel.placement import Placement
from overdrive.parallel.rebind import rebind
from overdrive.parallel.topology import Topology
from overdrive.precision.autocast import AutocastForward
from overdrive.strategies.base import EngineDecision, Params, Strategy, TrainingLoop, _raw
from overdrive.strategies.rules import NO_RULES, LoopRules

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle as PipelineSchedule

    from overdrive.checkpoint.records import StateDict
    from overdrive.training.accumulation import StepWindow

MICRO_BATCHES_KEY = "megatron_lm_config.num_micro_batches"


@dataclass(frozen=True)
class PPSettings:
    """What the pipeline strategy needs from the settings (and from code)."""

    degree: int
    micro_batches: int
    schedule: str  # "1F1B" or "GPipe"
    loss_fn: LossFn | None = None
    split_points: Sequence[int] | None = None
    key: str = "parallelism_config.parallelism_config_pp_size"  # the degree's setting
    # where the loss is given in code: ParallelismConfig(pp_loss_fn=...), or under MEGATRON_LM
    # MegatronLMPlugin(pipeline_loss_fn=...)
    loss_fn_owner: str = "ParallelismConfig"
    loss_fn_key: str = "pp_loss_fn"

    def loss_fn_in_code(self, value: str = "...") -> str:
        """How the loss is given in code, e.g. ``ParallelismConfig(pp_loss_fn=...)``."""
        return f"{self.loss_fn_owner}({self.loss_fn_key}={value})"


@dataclass
class PipelineOutput:
    """What a pipelined model's call returns: the batch's loss on every process, and the
    logits (the last stage's output) on the last stage only (None elsewhere)."""

    loss: torch.Tensor | None
    logits: torch.Tensor | None = None

    def __getitem__(self, key: str) -> torch.Tensor | None:
        if key not in ("loss", "logits"):
            raise KeyError(key)
        return self.loss if key == "loss" else self.logits


class PipelinedModel(nn.Module):
    """The prepared model: its parameters are this process's stage; a call runs the schedule."""

    def __init__(self, stage: Stage, original: nn.Module, strategy: PipelineParallelStrategy):
        super().__init__()
        self.stage_module = stage.module
        self.stage = stage
        self._original = [original]  # not a submodule: its parameters are the stage's
        self._strategy = [strategy]

    @property
    def module(self) -> nn.Module:
        """The user's model, holding only this stage's parts."""
        return self._original[0]

    def forward(self, *args: object, **kwargs: object) -> PipelineOutput:
        labels = kwargs.pop("labels", None)
        inputs = args[0] if args else kwargs.pop("input_ids", None)
        extra = {k: v for k, v in kwargs.items() if not _ignorable(k, v)}
        if len(args) > 1 or extra or not isinstance(inputs, torch.Tensor):
            given = [f"{len(args)} positional"] + sorted(extra)
            raise OverdriveError(
                "a pipelined model takes one input tensor (positional or input_ids=) and "
                f"labels=; it got {', '.join(given)}\n"
                "  fix: pass the inputs as one tensor (attention masks other than all-ones "
                "are not available yet under pipeline parallelism)"
            )
        if labels is not None and not isinstance(labels, torch.Tensor):
            raise OverdriveError(
                f"a pipelined model takes labels= as a tensor; it got {type(labels).__name__}\n"
                "  fix: pass the targets as one tensor"
            )
        return self._strategy[0].run(self, inputs, labels)


def _ignorable(key: str, value: object) -> bool:
    """Keyword arguments that change nothing: None, use_cache, an all-ones attention mask."""
    if value is None or key in ("use_cache", "return_dict"):
        return True
    return key == "attention_mask" and isinstance(value, torch.Tensor) and bool(value.all())


class PipelineParallelStrategy(Strategy):
    """One pipeline stage per process, each run through the parallelize chain (tensor
    parallelism, then FSDP2 or replication over the data-parallel processes)."""

    name = "pipeline_parallel"
    checkpoints_mid_window = False
    optimizer_state_by_name = True
    optimizer_holds_a_part = True

    def __init__(
        self,
        device: torch.device,
        topology: Topology,
        pp: PPSettings,
        chain: Chain | None = None,
        *,
        rules: LoopRules = NO_RULES,
    ) -> None:
        super().__init__(device, topology, rules=rules)
        self.layout: ParallelLayout = topology.layout
        self.pp = pp
        self.chain = chain or Chain()
        self._replaced: dict[int, nn.Parameter] = {}  # the chain's new parameters, by old id
        self._models: list[PipelinedModel] = []
        self._optimizers: list[torch.optim.Optimizer] = []
        self._dropped: set[int] = set()  # ids of parameters other stages hold
        self._schedules: dict[tuple[object, ...], PipelineSchedule] = {}
        self._stepped = False  # the last call ran backward: accelerator.backward skips it
        # gradient_accumulation_steps as prepare saw it and the Accelerator tells it since
        self._steps = 1
        self._in_window = False  # inside no_sync: replicas average at the window's end only
        self._micro_losses: list[torch.Tensor] = []
        self._loss_channel: LossChannel | None = None

    @property
    def mesh(self) -> DeviceMesh:
        assert self.topology is not None
        return self.topology.mesh

    @property
    def pp_group(self) -> ProcessGroup:
        return self.mesh["pp"].get_group()

    @property
    def stage_index(self) -> int:
        return int(self.mesh["pp"].get_local_rank())

    # --- models and optimizers -------------------------------------------------------
    def prepare_engine(
        self, objects: Sequence[object], prepared: Sequence[object], loop: TrainingLoop
    ) -> EngineDecision:
        self._steps = loop.accumulation_steps  # the loss inside the schedule divides by k
        return EngineDecision()

    def set_accumulation_steps(self, steps: int) -> None:
        self._steps = steps

    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        if any(model is m or model is m.module for m in self._models):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            return super().setup_model(model, device_placement=device_placement)
        # Every stage starts from rank 0's weights (one tensor at a time through the device),
        # and only the stage moves to the device: the whole model never sits there.
        before = {id(p) for p in model.parameters()}
        pp = self.pp
        split = PipelineSplit(
            self.stage_index,
            pp.degree,
            pp.split_points,
            key=pp.key,
            loss_given=pp.loss_fn is not None,
            loss_key=pp.loss_fn_key,
            loss_in_code=pp.loss_fn_in_code("lambda output, target: ..."),
        )
        place = Placement(self.device) if device_placement else None
        broadcast = BroadcastFromMain(self.device)
        chain = replace(self.chain, broadcast=broadcast, split=split, place=place)
        done = parallelize(model, self.mesh, chain)
        stage = done.stage
        assert stage is not None
        # what this process's stage held before the chain replaced any of it
        kept = set(done.replaced) | {id(p) for p in stage.module.parameters()}
        self._dropped |= before - kept
        self._replaced.update(done.replaced)
        _keep_autocast(model, stage.module)
        wrapped = PipelinedModel(stage, model, self)
        self._models.append(wrapped)
        for optimizer in self._optimizers:
            self._keep_stage_params(optimizer)
        return wrapped

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        self._optimizers.append(optimizer)
        self._keep_stage_params(optimizer)
        return optimizer

    def _keep_stage_params(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer steps this stage's parameters only (the others live elsewhere)."""
        for group in optimizer.param_groups:
            kept = [i for i, p in enumerate(group["params"]) if id(p) not in self._dropped]
            group["params"] = [group["params"][i] for i in kept]
            if "param_names" in group:  # built from named_parameters(): names follow
                group["param_names"] = [group["param_names"][i] for i in kept]
        for p in [p for p in optimizer.state if id(p) in self._dropped]:
            del optimizer.state[p]
        rebind(optimizer, self._replaced)  # the chain's DTensor parameters (TP, FSDP)

    def unwrap(self, model: nn.Module) -> nn.Module:
        if isinstance(model, PipelinedModel):
            return model.module
        return super().unwrap(model)

    # --- the schedule ------------------------------------------------------------------
    def run(
        self, model: PipelinedModel, inputs: torch.Tensor, labels: torch.Tensor | None
    ) -> PipelineOutput:
        """One schedule over the batch: forward (and backward when training) on every stage."""

        training = model.training and torch.is_grad_enabled()
        n = self.pp.micro_batches
        if inputs.shape[0] % n:
            raise OverdriveError(
                f"a batch of {inputs.shape[0]} samples does not split into {n} equal "
                f"micro-batches ({MICRO_BATCHES_KEY})\n  fix: use a batch size divisible by "
                f"{n} (drop_last=True keeps the last batch full), or change {MICRO_BATCHES_KEY}"
            )
        if training and labels is None:
            raise OverdriveError(
                "a pipelined model trains inside its call, so it needs labels=\n"
                "  fix: call model(inputs, labels=targets) (for a causal LM the labels are "
                "the input ids); to run without a loss, call it under torch.no_grad()"
            )
        stage = model.stage
        with_loss = labels is not None
        schedule = self._schedule(model, inputs, training, with_loss)
        inputs = inputs.to(self.device)
        target = labels.to(self.device) if (labels is not None and stage.is_last) else None
        args = (inputs,) if stage.is_first else ()
        self._micro_losses = []
        losses: list[torch.Tensor] = []  # the schedule's: one per micro-batch, scaled
        kept = losses if with_loss else None
        channel = self._channel()
        if with_loss and not stage.is_last:
            channel.expect()
        if training:
            outputs = schedule.step(*args, target=target, losses=kept)
        else:
            outputs = schedule.eval(*args, target=target, losses=kept)
        loss = None
        if with_loss and stage.is_last:
            # the plain values of the schedule's losses (a first call also runs the loss
            # once while it infers shapes: that one is not a micro-batch's); sent before the
            # replicas average, so the other stages need not wait for that too
            loss = torch.stack(self._micro_losses[-len(losses) :]).mean()
            channel.send(loss)
        if training:
            if not self._in_window:
                self._average_over_replicas(model)
            self._stepped = True
        if with_loss and not stage.is_last:
            loss = channel.receive()
        return PipelineOutput(loss=loss, logits=outputs if stage.is_last else None)

    def _channel(self) -> LossChannel:
        """This pipeline's loss channel (its own process group: made once, by every
        process for every pipeline, at the first call, which every process makes)."""
        import torch.distributed as dist

        if self._loss_channel is None:
            for pipeline in groups_along(self.mesh, "pp"):
                group = dist.new_group(pipeline, group_desc="pp_loss")
                if dist.get_rank() in pipeline:
                    self._loss_channel = LossChannel(group, pipeline, self.device)
        if self._loss_channel is None:
            raise RuntimeError("this process is in no pipeline of the mesh")
        return self._loss_channel

    def _schedule(
        self, model: PipelinedModel, inputs: torch.Tensor, training: bool, with_loss: bool
    ) -> PipelineSchedule:
        """A stage and schedule per batch shape (every process of a pipeline reads the same
        batch, so all agree when a new one is needed: shapes are inferred once per stage)."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        key = (id(model), tuple(inputs.shape), inputs.dtype, training, with_loss)
        if key not in self._schedules:
            stage = model.stage
            pipe_stage = PipelineStage(
                stage.module, stage.index, stage.num_stages, self.device, group=self.pp_group
            )
            loss_fn = (stage.loss_fn or self.pp.loss_fn or _never) if with_loss else None
            scaled = self._scaled(loss_fn) if loss_fn is not None else None
            cls = Schedule1F1B if self.pp.schedule == "1F1B" and training else ScheduleGPipe
            # scale_grads=False: the schedule would divide every gradient, the ones summed
            # over an accumulation window included; the loss is divided instead.
            self._schedules[key] = cls(
                pipe_stage, self.pp.micro_batches, loss_fn=scaled, scale_grads=False
            )
        return self._schedules[key]

    def _scaled(self, loss_fn: LossFn) -> LossFn:
        """``loss_fn`` divided by micro-batches x accumulation steps (the gradients are the
        mean over the window, as one pass over it would give); the plain value is kept."""

        def scaled(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            loss = loss_fn(output, target)
            self._micro_losses.append(loss.detach().float())
            return loss / (self.pp.micro_batches * self._steps)

        return scaled

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        """Inside an accumulation window the replicas keep their own sums (averaged once,
        when the window's last micro-batch runs)."""
        return self._window()

    @contextlib.contextmanager
    def _window(self) -> Iterator[None]:
        self._in_window = True
        try:
            yield
        finally:
            self._in_window = False

    def _average_over_replicas(self, model: PipelinedModel) -> None:
        """Replicas of a stage average their gradients (FSDP2, when it runs, has already)."""
        import torch.distributed as dist

        if self.layout.dp_size == 1 or self.chain.fsdp is not None:
            return
        group = self.data_parallel_group()
        for p in model.parameters():
            if p.grad is not None:
                grad = getattr(p.grad, "_local_tensor", p.grad)  # a tp part: its own shard
                dist.all_reduce(grad, group=group)
                grad.div_(self.layout.dp_size)

    def backward(self, loss: torch.Tensor, window: StepWindow, /, **kwargs: object) -> None:
        """Nothing left to do after the pipelined call (it ran the backward passes)."""
        if self._stepped and not loss.requires_grad:
            self._stepped = False
            return
        raise OverdriveError(
            "under pipeline parallelism the prepared model's call runs the backward passes; "
            "accelerator.backward() takes the .loss that call returned (once per call)\n"
            "  fix: loss = model(inputs, labels=...).loss; accelerator.backward(loss); a loss "
            f"of your own goes in {self.pp.loss_fn_in_code()}"
        )

    # --- clipping ------------------------------------------------------------------------
    def clip_grad_norm_(
        self,
        parameters: Params,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        window: StepWindow | None,
    ) -> torch.Tensor:
        """Clip by the norm over every stage's gradients; return that global norm."""
        import torch.distributed as dist

        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        grads = [p.grad for p in params if p.grad is not None]
        norm_type = float(norm_type)
        # this stage's norm (over its tp and FSDP shards), then over the stages
        stage = total_norm(grads, norm_type).to(device=self.device, dtype=torch.float32)
        if math.isinf(norm_type):
            total = stage.clone()
            dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.pp_group)
        else:
            total = stage**norm_type
            dist.all_reduce(total, group=self.pp_group)
            total = total ** (1.0 / norm_type)
        if not any(hasattr(g, "device_mesh") for g in grads):
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)  # no host sync
            return total
        # DTensor grads (the chain split or sharded the stage) take a plain number: the
        # coefficient as torch.nn.utils computes it (float32), so one process and a
        # pipeline clip by the same value
        coef = float(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        if coef < 1.0:
            with torch.no_grad():
                for g in grads:
                    g.mul_(coef)
        return total

    # --- checkpoints ---------------------------------------------------------------------
    def _model_state(self, model: nn.Module, sharded: bool) -> StateDict:
        """Whole: the model's weights on the main process (every stage's, by their names in
        the unsplit model), an empty dict elsewhere. Sharded: this stage's tensors as boxes
        (written by its first data-parallel replica), the others' as placeholders. Both are
        collective over the pipeline."""
        if not isinstance(model, PipelinedModel):  # not split: every process holds it whole
            return super()._model_state(model, sharded)
        stage = model.stage
        if sharded:
            return stage_model_state(stage.module, stage.names, self.pp_group, write=self._writes())
        return whole_model_state(stage.module, stage.names, self.pp_group)

    def _load_model_state(
        self, model: nn.Module, state_dict: StateDict, sharded: bool, strict: bool
    ) -> object:
        """Load this stage's part of the whole model's state dict (every process reads it;
        a sharded one is strict whatever ``strict`` says)."""
        if not isinstance(model, PipelinedModel):
            return super()._load_model_state(model, state_dict, sharded, strict)
        strict = strict or sharded
        names = model.stage.names
        local = [k for k in model.stage.module.state_dict() if k in names]
        missing = [names[k] for k in local if names[k] not in state_dict]
        if strict and missing:
            raise OverdriveError(
                f"the saved model has no {', '.join(missing[:3])} ({len(missing)} missing) "
                f"for pipeline stage {model.stage.index}\n  fix: load a checkpoint of the "
                "same model"
            )
        live = model.stage.module.state_dict()
        wanted = {k: _like(state_dict[names[k]], live[k]) for k in local if names[k] in state_dict}
        return model.stage.module.load_state_dict(wanted, strict=strict)

    def _optimizer_state(self, optimizer: torch.optim.Optimizer, sharded: bool) -> StateDict:
        """Keyed by the unsplit model's parameter names, as FSDP's sharded state is. Whole:
        every stage's entries on the main process, an empty dict elsewhere. Sharded: this
        stage's tensors as boxes, the others' as placeholders. Collective over the pipeline."""
        raw = _raw(optimizer)
        fqn = self._param_names()
        if sharded:
            return stage_optimizer_state(raw, fqn, self.pp_group, write=self._writes())
        return whole_optimizer_state(raw, fqn, self.pp_group)

    def _load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, state: StateDict, sharded: bool
    ) -> None:
        """Load this stage's entries of the optimizer's state (by parameter name)."""
        raw = _raw(optimizer)
        fqn = self._param_names()
        if sharded:
            load_stage_optimizer(raw, fqn, state)
        else:
            load_whole_optimizer(raw, fqn, state)

    # Pipeline checkpoints are always sharded (whatever fsdp_state_dict_type says): each
    # stage writes its own part, keyed as FSDP's sharded state dicts are.
    @property
    def sharded_checkpoints(self) -> bool:
        return True

    def _writes(self) -> bool:
        """Whether this process writes its stage's tensors: its first replica does."""
        import torch.distributed as dist

        return self.layout.dp_rank(dist.get_rank()) == 0

    def checkpoint_names(self) -> dict[int, str]:
        return self._param_names()

    def _param_names(self) -> dict[int, str]:
        """id(parameter) -> its name in the unsplit model, over every pipelined model."""
        out: dict[int, str] = {}
        for model in self._models:
            for name, p in model.stage.module.named_parameters():
                out[id(p)] = model.stage.names[name]
        return out

    def teardown(self) -> None:
        if self._loss_channel is not None:
            self._loss_channel.finish()
        self._models.clear()
        self._optimizers.clear()
        self._schedules.clear()


def _keep_autocast(model: nn.Module, stage_module: nn.Module) -> None:
    """The stage runs under the autocast the precision plugin gave the model's forward
    (a stage calls the model's parts, not that forward)."""
    wrapped = model.__dict__.get("forward")
    if isinstance(wrapped, AutocastForward):
        stage_module.forward = AutocastForward(stage_module.forward, wrapped._args)


def _like(full: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """A whole saved tensor laid out as ``live`` is (this process's part of a DTensor)."""
    mesh = getattr(live, "device_mesh", None)
    if mesh is None:
        return full
    from torch.distributed.tensor import distribute_tensor

    local = full.to(device=live.to_local().device, dtype=live.dtype)  # type: ignore[attr-defined]
    return distribute_tensor(local, mesh, live.placements, src_data_rank=None)  # type: ignore[attr-defined]


def _never(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss other stages hand their schedule: only the last stage computes one, but a
    schedule without a loss function runs no backward passes."""
    raise AssertionError("only the last pipeline stage computes the loss")
