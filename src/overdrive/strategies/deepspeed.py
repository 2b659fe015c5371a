"""DeepSpeed ZeRO stages 0-3 (with CPU/NVMe offload), its engine adapted to the Strategy
interface so the plain loop stays the plain loop.

DeepSpeed's engine owns the model, optimizer, backward, gradient accumulation, clipping and
loss scaling. ``prepare`` builds it with one ``deepspeed.initialize`` call from the model, the
optimizer and the dataloader's batch size; ``backward`` goes to ``engine.backward`` (told
whether the micro-batch closes a window), the optimizer step to ``engine.step``, and
``clip_grad_norm_`` returns the global norm the engine clips by. Checkpoints hold full
tensors gathered through DeepSpeed's fragment API (``overdrive.ds.state``), not DeepSpeed's
pickled files. Semantics and limits: ``docs/deepspeed.md``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeGuard, cast

import torch
from torch import nn
from torch.utils.data import DataLoader

from overdrive.checkpoint.records import StateDict
from overdrive.config import HANDOVER_VARIABLE
from overdrive.ds import state as ds_state
from overdrive.ds.config import DeepSpeedConfig
from overdrive.ds.dummies import DummyOptim, DummyScheduler
from overdrive.ds.engine import (
    DeepSpeedEngine,
    EngineScheduler,
    HfZero3Config,
    check_offload,
    check_precision,
    fit_optimizer,
    import_deepspeed,
    initialize,
    say,
)
from overdrive.ds.finish import finish
from overdrive.ds.window import WindowScale
from overdrive.errors import ConfigError, OverdriveError
from overdrive.parallel.topology import Topology
from overdrive.strategies.base import EngineDecision, Params, Strategy, TrainingLoop
from overdrive.strategies.rules import NO_RULES, LoopRules
from overdrive.training.scheduler import AcceleratedScheduler, is_scheduler

if TYPE_CHECKING:
    from overdrive.precision import Precision
    from overdrive.training.accumulation import StepWindow


def _trains(obj: object) -> TypeGuard[nn.Module]:
    return isinstance(obj, nn.Module) and any(p.requires_grad for p in obj.parameters())


class DeepSpeedStrategy(Strategy):
    """One DeepSpeed engine per Accelerator: one trained model, its optimizer and scheduler."""

    name = "deepspeed"
    precision_owner = "DeepSpeed"  # its bf16/fp16 sections and loss scaler
    checkpoints_mid_window = False  # ZeRO keeps the summed gradients in its own buffers
    # The DeepSpeed plugin the Accelerator exposes (``accelerator.state.deepspeed_plugin``):
    # transformers' Trainer fills its config's "auto" values there before prepare.
    exposed_plugin: object | None = None
    optimizer_state_by_name = None  # fp32 masters and ZeRO state: its own format

    def __init__(
        self,
        device: torch.device,
        config: DeepSpeedConfig,
        *,
        zero3_init: bool = False,
        topology: Topology | None = None,
        rules: LoopRules = NO_RULES,
    ) -> None:
        super().__init__(device, topology, rules=rules)
        self.config = config
        self.zero3_init = zero3_init and config.zero_stage == 3
        self.engine: DeepSpeedEngine | None = None
        self.basic_optimizer: torch.optim.Optimizer | None = None
        self._deepspeed: ModuleType | None = None
        # the last backward told the engine the window closes, and no step has run since
        self._boundary_pending = False
        self._stepped: bool | None = None  # set when clip_grad_norm_ ran this window's step
        self._last_norm = torch.tensor(float("nan"))
        self._clip_noted = False  # a max_norm unlike gradient_clipping was said once
        self._window = WindowScale(say)
        self._replaced: torch.optim.Optimizer | None = (
            None  # the user's optimizer, when DeepSpeed's CPU Adam replaced it
        )
        self._hf = HfZero3Config(self._init_config()) if self.zero3_init else None
        if self._hf is not None:
            self._hf.register()
        launched = HANDOVER_VARIABLE in os.environ  # the launcher said those it could see
        for note in config.notes:
            if not launched or "code Accelerator(" in note:
                say(note, logging.WARNING)

    @property
    def deepspeed(self) -> ModuleType:
        if self._deepspeed is None:
            self._deepspeed = import_deepspeed(self.device)
            check_precision(self.config, self.device)
            check_offload(self.config)
        return self._deepspeed

    def _init_config(self) -> dict[str, object]:
        """What ``deepspeed.zero.Init`` reads (partitioning, offload, dtype); batch sizes are
        placeholders there, the real ones are filled at prepare()."""
        import torch.distributed as dist

        world = dist.get_world_size() if dist.is_initialized() else 1
        keep = ("zero_optimization", "bf16", "bfloat16", "fp16")
        init = {k: v for k, v in self.config.config.items() if k in keep}
        return {**init, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                "train_batch_size": world}  # fmt: skip

    def model_init_context(self) -> contextlib.AbstractContextManager[object]:
        """With zero3_init_flag under ZeRO-3: build the model already partitioned."""
        if not self.zero3_init:
            return contextlib.nullcontext()
        init: contextlib.AbstractContextManager[object] = self.deepspeed.zero.Init(
            config_dict_or_path=self._init_config()
        )
        return init

    # --- prepare: one deepspeed.initialize for model, optimizer, scheduler, batch size -------
    def _engine_parts(self, objects: Sequence[object]) -> tuple[list[int], list[int], list[int]]:
        """Positions of the model, optimizer and scheduler a new engine is built from."""
        models = [i for i, o in enumerate(objects) if _trains(o) and not self._is_ours(o)]
        optimizers = [
            i for i, o in enumerate(objects) if isinstance(o, (torch.optim.Optimizer, DummyOptim))
        ]
        optimizers = [i for i in optimizers if objects[i] is not self.basic_optimizer]
        schedulers = [i for i, o in enumerate(objects) if _is_new_scheduler(o, self)]
        return models, optimizers, schedulers

    def check_prepare(self, objects: Sequence[object]) -> None:
        models, optimizers, schedulers = self._engine_parts(objects)
        if models or optimizers or schedulers:
            self._check_one_engine(objects, models, optimizers, schedulers)
            return
        dummies = [o for o in objects if isinstance(o, (DummyOptim, DummyScheduler))]
        if dummies:
            raise ConfigError(
                f"prepare() got {type(dummies[0]).__name__} without the model it belongs to",
                key="distributed_type",
                fix="pass the model, DummyOptim and DummyScheduler to one prepare() call",
            )

    def prepare_engine(
        self, objects: Sequence[object], prepared: Sequence[object], loop: TrainingLoop
    ) -> EngineDecision:
        """One ``deepspeed.initialize`` for the model, optimizer, scheduler and the prepared
        dataloaders' micro-batch size; the accumulation window is the engine's."""
        models, optimizers, schedulers = self._engine_parts(objects)
        if not models:
            return EngineDecision()  # dataloaders, evaluation-only models, or prepared before
        micro, micro_source = self._micro_batch(objects, prepared, loop)
        model = cast(nn.Module, objects[models[0]])  # _engine_parts picks modules that train
        optimizer = objects[optimizers[0]] if optimizers else None
        scheduler = objects[schedulers[0]] if schedulers else None
        config = finish(
            self.config,
            micro_batch=micro,
            micro_source=micro_source,
            world_size=loop.num_processes,
            optimizer=optimizer,
            scheduler=scheduler,
            on_cpu=self.device.type == "cpu",
            model=model,
            caller_clipping=_caller_clipping(self.exposed_plugin),
        )
        steps = self._imposed_steps(loop)
        fitted = fit_optimizer(optimizer, self.config, config)
        self._replaced = None
        if fitted is not optimizer and isinstance(optimizer, torch.optim.Optimizer):
            self._replaced = optimizer  # what DeepSpeed's CPU Adam replaced
        engine: DeepSpeedEngine = initialize(self.deepspeed, model, fitted, config, scheduler)
        _compile_engine(engine, self.rules)
        self.engine = engine
        self.basic_optimizer = engine.basic_optimizer
        built: dict[int, object] = {models[0]: engine}
        if optimizers:
            built[optimizers[0]] = self.basic_optimizer
        if schedulers:
            engine_made = isinstance(scheduler, DummyScheduler)
            built[schedulers[0]] = (
                EngineScheduler(engine.lr_scheduler) if engine_made else scheduler
            )
        return EngineDecision(built, accumulation_steps=steps)

    def _is_ours(self, obj: object) -> bool:
        return self.engine is not None and (obj is self.engine or obj is self.engine.module)

    def _check_one_engine(
        self,
        objects: Sequence[object],
        models: list[int],
        optimizers: list[int],
        schedulers: list[int],
    ) -> None:
        fix = (
            "pass the model, its optimizer, its scheduler and the training dataloader to one "
            "accelerator.prepare() call; DeepSpeed builds them together, one engine per "
            "Accelerator"
        )
        if self.engine is not None:
            raise OverdriveError(
                "DeepSpeed already runs an engine in this Accelerator (prepared earlier); a "
                f"second model, optimizer or scheduler cannot join it\n  fix: {fix}"
            )
        counts = {"models": models, "optimizers": optimizers, "schedulers": schedulers}
        many = [f"{len(v)} {k}" for k, v in counts.items() if len(v) > 1]
        if many or not models:
            what = ", ".join(many) if many else "an optimizer or scheduler but no model to train"
            raise OverdriveError(f"DeepSpeed prepare() got {what}\n  fix: {fix}")

    @staticmethod
    def _micro_batch(
        objects: Sequence[object], prepared: Sequence[object], loop: TrainingLoop
    ) -> tuple[int | None, str]:
        loaders = [prepared[i] for i, o in enumerate(objects) if isinstance(o, DataLoader)]
        sizes = [getattr(loader, "batch_size", None) for loader in loaders] + [*loop.batch_sizes]
        for size in sizes:
            if size is not None:
                return int(size), f"the prepared dataloader's batch size per process ({size})"
        return None, "no prepared dataloader"

    def _imposed_steps(self, loop: TrainingLoop) -> int | None:
        """The engine's window, said when it differs from the loop's (None: the caller
        divides its losses and ends its windows itself)."""
        if self.config.caller_accumulates:
            return None
        steps = self.config.gradient_accumulation_steps
        current = loop.accumulation_steps
        if current != steps:
            say(
                f"gradient_accumulation_steps is {steps}, as {self.config.origin} fixes it "
                f"(the loop's value was {current})"
            )
        return steps

    # --- models and optimizers prepared one by one --------------------------------------
    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        if self.engine is not None and self._is_ours(model):
            return cast(nn.Module, self.engine)  # the engine is the module DeepSpeed trains
        if _trains(model):
            raise OverdriveError(
                "under DeepSpeed a model to train is prepared together with its optimizer\n"
                "  fix: call accelerator.prepare(model, optimizer, dataloader[, scheduler])"
            )
        return super().setup_model(model, device_placement=device_placement)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        if optimizer is not self.basic_optimizer or optimizer is None:
            raise OverdriveError(
                "under DeepSpeed an optimizer is prepared together with its model\n"
                "  fix: call accelerator.prepare(model, optimizer, dataloader[, scheduler])"
            )
        return optimizer

    def unwrap(self, model: nn.Module) -> nn.Module:
        if self.engine is not None and model is self.engine:
            return super().unwrap(self.engine.module)
        return super().unwrap(model)

    # --- the step ------------------------------------------------------------------
    def _require_engine(self, what: str) -> DeepSpeedEngine:
        if self.engine is None:
            raise OverdriveError(
                f"{what} under DeepSpeed needs the engine, which prepare() builds\n"
                "  fix: call accelerator.prepare(model, optimizer, dataloader) first"
            )
        return self.engine

    def backward(self, loss: torch.Tensor, window: StepWindow, /, **kwargs: object) -> None:
        """``engine.backward``; the loss arrives divided by k, and with exact_accumulation a
        window known to be shorter (m < k batches left in the epoch) is scaled to its mean."""
        engine = self._require_engine("backward")
        factor = self._window.factor(window) if window.exact else 1.0
        self._boundary_pending = window.sync_gradients
        engine.set_gradient_accumulation_boundary(window.sync_gradients)
        # The loss is already scaled for accumulation here (by the Accelerator, or by the
        # caller when it accumulates itself, as Trainer does and says with scale_wrt_gas=False).
        kwargs.pop("scale_wrt_gas", None)
        engine.backward(loss * factor if factor != 1.0 else loss, scale_wrt_gas=False, **kwargs)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        # The engine reduces at the window's boundary (set in backward), not in each backward.
        return contextlib.nullcontext()

    def rescale_grads(self, optimizer: torch.optim.Optimizer, factor: float) -> None:
        return None  # a short window's losses were already scaled to its mean in backward

    def _step(self) -> bool:
        if self._stepped is not None:
            ran, self._stepped = self._stepped, None
            return ran
        engine = self._require_engine("optimizer.step()")
        if not self._boundary_pending:  # no backward closed a window since the last step
            return False
        engine.step()
        self._boundary_pending = False
        ran = bool(engine.was_step_applied())
        if ran and self._replaced is not None:
            # A torch scheduler watches the user's optimizer, which CPU Adam stands in for.
            self._replaced._opt_called = True  # type: ignore[attr-defined]
        return ran

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        precision: Precision,
        closure: Callable[[], float] | None = None,
    ) -> bool:
        if closure is not None:
            raise OverdriveError(
                "optimizer.step(closure) is not supported under DeepSpeed: the engine steps "
                "once per window\n  fix: call optimizer.step() without a closure"
            )
        return self._step()

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        return None  # the engine clears gradients after its step

    def clip_grad_norm_(
        self,
        parameters: Params,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        window: StepWindow | None,
    ) -> torch.Tensor:
        """DeepSpeed clips inside its step by ``gradient_clipping``; this runs that step now
        (the following ``optimizer.step()`` does nothing) and returns the global norm before
        clipping. It steps when ``window`` closes (None: the step closing one) after a backward
        that told the engine so, once; otherwise (inside a window, a micro-batch that skipped
        its backward, a second clip) nothing is clipped and the last step's norm is returned."""
        engine = self._require_engine("clip_grad_norm_")
        self._check_clipping(max_norm, norm_type)
        closes = window is None or window.sync_gradients
        if not (closes and self._boundary_pending):
            return self._last_norm
        norm = None
        if not hasattr(engine.optimizer, "_global_grad_norm"):  # stage 0 in fp32: torch clips
            grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
            norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
        self._stepped = None
        self._stepped = self._step()
        if norm is None:
            norm = engine.get_global_grad_norm()
        value = float(norm) if norm is not None else math.nan
        self._last_norm = torch.tensor(value)
        return self._last_norm

    def _check_clipping(self, max_norm: float, norm_type: float) -> None:
        """As in Hugging Face Accelerate, the engine clips by ``gradient_clipping`` whatever
        ``max_norm`` says; a different value is said once (in the log), never refused."""
        configured = self.config.get("gradient_clipping")
        if self._clip_noted or max_norm == math.inf or configured in (None, "auto"):
            return
        if norm_type != 2.0 or not math.isclose(float(max_norm), self.config.gradient_clipping):
            self._clip_noted = True
            source = self.config.sources.get("gradient_clipping", "DeepSpeed's default")
            say(
                f"clip_grad_norm_(max_norm={max_norm}, norm_type={norm_type}): under DeepSpeed "
                f"the engine clips the 2-norm by gradient_clipping = {configured} ({source}), "
                "as in Hugging Face Accelerate; set deepspeed_config.gradient_clipping (or "
                '"gradient_clipping": "auto" in the DeepSpeed JSON) to clip at another value',
                logging.WARNING,
            )

    # --- state dicts (full tensors; see overdrive.ds.state) -------------------------------
    def _main(self) -> bool:
        import torch.distributed as dist

        return not dist.is_initialized() or dist.get_rank() == 0

    # DeepSpeed keeps its own partitioned format: ``sharded`` changes nothing here.
    def _model_state(self, model: nn.Module, sharded: bool) -> StateDict:
        if not self._is_ours(model):
            return super()._model_state(model, sharded)
        fp32 = self.config.zero_stage == 3 and not self.config.get(
            "zero_optimization.stage3_gather_16bit_weights_on_model_save", False
        )
        engine = cast(DeepSpeedEngine, self.engine)  # _is_ours: built
        return ds_state.model_state_dict(
            self.deepspeed, engine, fp32_masters=fp32, main=self._main()
        )

    def _load_model_state(
        self, model: nn.Module, state: StateDict, sharded: bool, strict: bool
    ) -> object:
        if not self._is_ours(model):
            return super()._load_model_state(model, state, sharded, strict)
        engine = cast(DeepSpeedEngine, self.engine)  # _is_ours: built
        return ds_state.load_model_state_dict(self.deepspeed, engine, state, strict)

    def _optimizer_state(self, optimizer: torch.optim.Optimizer, sharded: bool) -> StateDict:
        engine = self._require_engine("save_state")
        if engine.fp16_enabled() and self.config.zero_stage == 0:
            raise OverdriveError(
                "save_state under DeepSpeed fp16 with ZeRO stage 0 is not supported: that "
                "optimizer keeps its fp32 masters outside DeepSpeed's fragment API\n"
                "  fix: use zero_stage 1 or higher (or bf16)"
            )
        return ds_state.optimizer_state_dict(engine, engine.basic_optimizer)

    def _load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, state: StateDict, sharded: bool
    ) -> None:
        engine = self._require_engine("load_state")
        ds_state.load_optimizer_state_dict(engine, engine.basic_optimizer, state)

    def teardown(self) -> None:
        if self.engine is not None:
            with contextlib.suppress(Exception):
                self.engine.destroy()
        self.engine = None
        self.basic_optimizer = None
        self._boundary_pending = False
        if self._hf is not None:
            HfZero3Config.unregister()
            self._hf = None


def _is_new_scheduler(obj: object, strategy: DeepSpeedStrategy) -> bool:
    if isinstance(obj, DummyScheduler):
        return True
    return (
        is_scheduler(obj) and not isinstance(obj, AcceleratedScheduler) and strategy.engine is None
    )


def _caller_clipping(plugin: object) -> object:
    """The ``gradient_clipping`` a library wrote into the DeepSpeed plugin's config after the
    Accelerator was made (transformers' Trainer fills its "auto" from ``max_grad_norm``)."""
    config = getattr(getattr(plugin, "hf_ds_config", None), "config", None)
    return config.get("gradient_clipping") if isinstance(config, dict) else None


def _compile_engine(engine: DeepSpeedEngine, rules: LoopRules) -> None:
    """``dynamo_config``'s compile step on the engine DeepSpeed built (it wraps the model
    itself, so the chain does not): regional, each repeated block of the model in place;
    else the engine's own ``compile``, which its forward then runs."""
    step = rules.compile
    if step is None:
        return
    if step.regional:
        step.apply_regions(engine.module)
        return
    kwargs = dict(step.kwargs)
    backend = kwargs.pop("backend")
    engine.compile(backend=backend, compile_kwargs=kwargs)
