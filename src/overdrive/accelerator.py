"""The Accelerator: the one object a training script holds. It resolves settings once, asks
the process state who this process is, and delegates: backend work to a Strategy, numerics
to a Precision policy, data to the prepared loaders, collectives to ``processes/ops.py``."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils.data import DataLoader

from overdrive import tracking
from overdrive.arguments import kwargs_handlers as handler_kinds
from overdrive.arguments.plugins import (
    DataLoaderConfiguration,
    DeepSpeedPlugin,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    MegatronLMPlugin,
    ParallelismConfig,
    ProjectConfiguration,
    plugin_aliases,
)
from overdrive.compat.accelerator_compat import AcceleratorCompat
from overdrive.compat.checkpoint_args import load_state_kwargs, save_state_kwargs
from overdrive.compat.gradient_state import GradientStateCompat
from overdrive.compat.plugin_views import expose_plugins
from overdrive.config import Settings, load_settings
from overdrive.data import (
    PreparedDataLoader,
    gather_for_metrics,
    prepare_data_loader,
    skip_first_batches,
)
from overdrive.logging import get_logger
from overdrive.optimizer import AcceleratedOptimizer
from overdrive.parallel.meta_init import init_empty_weights
from overdrive.precision import FP8RecipeKwargs, make_precision
from overdrive.processes import ops
from overdrive.processes.process_state import PartialState
from overdrive.processes.random_state import check_rng_types
from overdrive.setup import effective_settings
from overdrive.setup.accelerator_setup import (
    checked_accumulation_plugin,
    code_settings,
    export_for_transformers,
    project_configuration,
    registrable,
    sort_handlers,
    strategy_for,
    trackers_given,
    warn_split_batches_argument_ignored,
)
from overdrive.strategies import check_available
from overdrive.strategies.base import TrainingLoop
from overdrive.tracking import check_started, find_tracker
from overdrive.training.accumulation import StepWindow
from overdrive.training.loop_state import LoopState
from overdrive.training.prepare_order import placements_for, prepare_order
from overdrive.training.prepared import mark_prepared
from overdrive.training.scheduler import AcceleratedScheduler, is_scheduler
from overdrive.utils.imports import is_bitsandbytes_multi_backend_available, is_xpu_available

F = TypeVar("F", bound=Callable[..., Any])
logger = get_logger(__name__)


class Accelerator(AcceleratorCompat):
    """Runs one plain PyTorch loop on a CPU, one GPU, or many processes, unchanged.

    Settings passed here win over environment variables, launch flags and the config file
    (``config_file`` replaces the default one). ``num_processes`` in code must match the
    processes actually running; otherwise the error says how to launch them.
    ``rng_types`` ("torch", "cuda", "generator", "python", "numpy") names RNGs copied from
    rank 0 to every process when a prepared dataloader starts an epoch; the default is none,
    since the shuffle order is already shared. Loop semantics: ``docs/training_loop.md``.
    The positional parameters are Hugging Face Accelerate's, in its order (``torch_tp_plugin``
    and ``deepspeed_plugins`` as ``plugins.plugin_aliases`` reads them); overdrive's own
    (``logging_dir``, ``num_processes``, ``debug``, ``config_file``) are keyword-only.
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool | None = None,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool | None = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: DeepSpeedPlugin | None = None,
        fsdp_plugin: FullyShardedDataParallelPlugin | None = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: MegatronLMPlugin | None = None,
        rng_types: Sequence[str] | None = None,
        log_with: Any = None,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: Sequence[Any] | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: Any = None,
        deepspeed_plugins: DeepSpeedPlugin | dict[str, DeepSpeedPlugin] | None = None,
        parallelism_config: ParallelismConfig | None = None,
        *,
        logging_dir: str | None = None,
        num_processes: int | None = None,
        debug: bool | None = None,
        config_file: str | None = None,
    ) -> None:
        both_accumulations = None not in (gradient_accumulation_plugin, gradient_accumulation_steps)
        deepspeed_plugin, parallelism_config = plugin_aliases(
            deepspeed_plugin, deepspeed_plugins, torch_tp_plugin, parallelism_config,
            both_accumulations=both_accumulations,
        )  # fmt: skip
        if split_batches:
            warn_split_batches_argument_ignored()
        args = dict(locals())
        plugins: list[Any] = [dataloader_config, project_config, deepspeed_plugin, fsdp_plugin]
        plugins += [megatron_lm_plugin, gradient_accumulation_plugin, parallelism_config]
        code = code_settings(args, plugins)
        self.settings: Settings = load_settings(
            code=code, code_label="Accelerator({}=...)", config_file=config_file
        )
        check_available(self.settings)
        handlers = sort_handlers(kwargs_handlers)
        self.kwargs_handlers = handlers
        init = handlers.get(handler_kinds.InitProcessGroupKwargs)
        self.state = PartialState(settings=self.settings, init_kwargs=init)

        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        # RNGs copied from rank 0 at each prepared loader's epoch start; shuffling needs
        # none (its seed is shared), so the default is to synchronise nothing.
        self.rng_types = check_rng_types(rng_types)
        self.dataloader_config = dataloader_config or DataLoaderConfiguration()
        self.exact_resume = bool(self.settings["exact_resume"])
        self.project_configuration = project_configuration(self.settings, project_config)
        self.log_with = self.settings["log_with"] or trackers_given(log_with)
        self.trackers: list[Any] = []
        self.megatron_lm_plugin = megatron_lm_plugin

        in_code = (fsdp_plugin, deepspeed_plugin, parallelism_config, megatron_lm_plugin)
        self.strategy = strategy_for(self.state, self.settings, handlers, *in_code)
        export_for_transformers(self.state.decision)
        # transformers' Trainer reads the plugins off the state to pick its checkpoint formats
        self.fsdp_plugin, self.deepspeed_plugin = expose_plugins(
            self.state, self.settings, self.strategy, fsdp_plugin, deepspeed_plugin
        )
        self.precision = make_precision(
            self.settings["mixed_precision"],
            self.state.device,
            autocast_kwargs=handlers.get(handler_kinds.AutocastKwargs),
            scaler_kwargs=handlers.get(handler_kinds.GradScalerKwargs),
            fp8_recipe=handlers.get(FP8RecipeKwargs),
            precision_owner=self.state.decision.precision_owner,
            source=str(self.settings.source("mixed_precision")),
            sharded_grads=self.strategy.sharded_grads,
            fp16_on_cpu=self.settings["fp16_on_cpu"],
        )
        plugin = checked_accumulation_plugin(gradient_accumulation_plugin)
        self._sync_with_dataloader = plugin.sync_with_dataloader
        self.gradient_state = GradientStateCompat(
            self.settings["gradient_accumulation_steps"],
            sync_each_batch=plugin.sync_each_batch,
            exact=self.settings["exact_accumulation"],
        )
        self.loop_state = LoopState()

        self._models: list[nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[Any] = []
        self._custom_objects: list[Any] = []
        effective_settings.report(self)  # rank 0: what is in force, code included
        self._compat_init()

    # --- who and where ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.state.device

    @property
    def distributed_type(self) -> Any:
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def use_distributed(self) -> bool:
        return self.state.num_processes > 1

    @property
    def mixed_precision(self) -> str:
        return self.settings["mixed_precision"]

    @property
    def split_batches(self) -> bool:
        return self.settings["split_batches"]

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.num_steps = int(steps)
        self.strategy.set_accumulation_steps(int(steps))  # a pipeline divides inside its call

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when a prepared optimizer's last step was skipped by loss scaling."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    # --- prepare ------------------------------------------------------------------------
    def prepare(self, *objects: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Prepare models, optimizers, dataloaders and schedulers; return them in order.

        Models move to the device (``device_placement``) and are wrapped for the backend;
        optimizers step only when an accumulation window closes; dataloaders shard data
        across processes; schedulers advance once per optimizer step that really ran.
        The order is ``prepare_order``'s; the strategy builds what it must build together.
        """
        self._check_not_reset()
        placements = placements_for(objects, device_placement, self.device_placement)
        self.strategy.check_prepare(objects)
        loaders, rest = prepare_order(objects)
        out = list(objects)
        for i in loaders:
            out[i] = self._preparer(objects[i])(objects[i], placements[i])
        loop = TrainingLoop.of(self.num_processes, self.gradient_state, self._dataloaders)
        decision = self.strategy.prepare_engine(objects, out, loop)  # placed already
        if decision.accumulation_steps is not None:  # the engine's window
            self.gradient_accumulation_steps = decision.accumulation_steps
        for i in rest:
            obj = decision.built.get(i, objects[i])
            out[i] = self._preparer(obj)(obj, placements[i] and i not in decision.built)
        mark_prepared(objects, out)
        return out[0] if len(out) == 1 else tuple(out)

    def _preparer(self, obj: Any) -> Callable[[Any, bool], Any]:
        """What prepares ``obj`` by its kind, called as (obj, device_placement) by ``prepare``."""
        if is_scheduler(obj):
            return lambda scheduler, _: self.prepare_scheduler(scheduler)
        if isinstance(obj, nn.Module):
            return self.prepare_model
        if isinstance(obj, torch.optim.Optimizer):
            return self.prepare_optimizer
        if isinstance(obj, DataLoader):
            return self.prepare_data_loader
        return lambda same, _: same

    def prepare_model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> nn.Module:
        """Convert (precision), place and wrap ``model`` (the strategy compiles it last).
        ``evaluation_mode``: convert and place only, and do not count it as prepared, so a later
        ``prepare`` for training still wraps it (transformers' evaluate-before-train)."""
        for prepared in self._models:
            if model is prepared or model is self.strategy.unwrap(prepared):
                return prepared  # prepared before (or its inner module): one wrapper per model
        place = self.device_placement if device_placement is None else device_placement
        self._check_quantized(model, is_bitsandbytes_multi_backend_available, is_xpu_available)
        if evaluation_mode:
            model = self.precision.convert_module(model)
            return model.to(self.device) if place else model
        model = self.precision.convert_module(model)  # also runs forward under autocast
        model = self.strategy.setup_model(model, device_placement=place)  # the chain
        self._models.append(model)
        return model

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        """Wrap ``optimizer`` so it follows accumulation windows and the precision policy."""
        if isinstance(optimizer, AcceleratedOptimizer):
            return optimizer
        for prepared in self._optimizers:
            if prepared.optimizer is optimizer:
                return prepared  # a second wrapper would rescale and step the same grads twice
        place = self.device_placement if device_placement is None else device_placement
        raw = self.strategy.setup_optimizer(optimizer)
        if place and raw.state:
            # State loaded before prepare (a resumed run) must live where the params live.
            raw.load_state_dict(raw.state_dict())
        self.precision.register_optimizer(raw)
        parts = (self.gradient_state, self.precision, self.strategy)
        wrapped = AcceleratedOptimizer.wrapping(raw, *parts)
        self._optimizers.append(wrapped)
        return wrapped

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` to advance once per optimizer step that really ran."""
        if isinstance(scheduler, AcceleratedScheduler):
            return scheduler
        for prepared in self._schedulers:
            if prepared.scheduler is scheduler:
                return prepared
        target = scheduler.optimizer
        owners = [o for o in self._optimizers if o is target or o.optimizer is target]
        wrapped = AcceleratedScheduler(
            scheduler,
            owners or self._optimizers,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            steps_per_advance=self._scheduler_steps_per_advance(),
        )
        self._schedulers.append(wrapped)
        return wrapped

    def prepare_data_loader(self, dataloader: Any, device_placement: bool | None = None) -> Any:
        """Shard ``dataloader`` across processes (see ``overdrive.data.prepare_data_loader``)."""
        if isinstance(dataloader, PreparedDataLoader):
            return dataloader  # prepared before: sharding it again would shard a share
        place = self.device_placement if device_placement is None else device_placement
        s = self.settings
        prepared = prepare_data_loader(
            dataloader,
            state=self.state,
            loop_state=self.loop_state,
            split_batches=s["split_batches"],
            dispatch_batches=s["dispatch_batches"],
            even_batches=s["even_batches"],
            use_seedable_sampler=s["use_seedable_sampler"],
            non_blocking=s["non_blocking"],
            data_seed=self.dataloader_config.data_seed,
            use_stateful_dataloader=self.dataloader_config.use_stateful_dataloader,
            device=self.device if place else None,
            rng_types=self.rng_types,
            data_parallel=self.strategy.data_parallel_coordinates(
                self.process_index, self.num_processes
            ),
        )
        prepared.gradient_state = self.gradient_state
        prepared.reads_after_step = self.exact_resume
        self._dataloaders.append(prepared)
        return prepared

    def cpu_ram_efficient_init(self) -> contextlib.AbstractContextManager[None]:
        """Build a model inside: with FSDP's ``cpu_ram_efficient_loading`` on, processes other
        than the main one create it empty (meta device) and ``prepare`` fills their shards
        from the main process; otherwise nothing changes."""
        efficient = self.state.decision.chain.fill_from_main and not self.is_main_process
        # Otherwise the backend's own way, if it has one (DeepSpeed ZeRO-3: zero3_init_flag).
        return init_empty_weights() if efficient else self.strategy.model_init_context()

    def unwrap_model(
        self,
        model: nn.Module,
        keep_fp32_wrapper: bool = True,
        keep_torch_compile: bool | None = None,
    ) -> nn.Module:
        """The user's module, under DDP and torch.compile wrappers."""
        module = self.strategy.unwrap(model)
        module = module if keep_fp32_wrapper else self.precision.revert_module(module)
        return self._keep_compiled(model, module, keep_torch_compile)

    # --- the training step ----------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by gradient_accumulation_steps and scaled (fp16)."""
        self.loop_state.work += 1
        steps = self.gradient_state.num_steps
        if steps > 1:
            loss = loss / steps
        window = StepWindow(self.gradient_state, self.loop_state, self._dataloaders)
        self.strategy.backward(self.precision.scale_loss(loss), window, **kwargs)

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """One micro-batch of an accumulation window.

        Gradients synchronise (and the prepared optimizer steps) on the window's last
        micro-batch, and on the last batch of a prepared dataloader; a window closed early
        after m < k micro-batches steps on its losses' sum / k, as in Hugging Face
        Accelerate, or on their mean with ``exact_accumulation`` (``training/accumulation.py``).
        Dataloaders without a length (iterable datasets) close their last window the same
        way once prepared (the end is found by reading one batch ahead); an unprepared
        loader gives no end signal, so its partial window carries into the next epoch.
        """
        gs = self.gradient_state
        self.loop_state.work += 1
        if gs.advance(self._sync_with_dataloader and self.loop_state.end_of_dataloader):
            if gs.rescale != 1.0:
                for opt in self._optimizers:
                    opt._pending_rescale = gs.rescale
            yield
        elif gs.sync_each_batch or not models:
            yield
        else:
            with contextlib.ExitStack() as stack:
                for model in models:
                    stack.enter_context(self.strategy.no_sync(model))
                yield

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip gradient synchronisation for backward passes inside the block."""
        return self.strategy.no_sync(model)

    def autocast(self, autocast_handler: handler_kinds.AutocastKwargs | None = None) -> Any:
        """Autocast for code outside a prepared model's forward (which already uses it)."""
        return self.precision.autocast(autocast_handler)

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The fp16 loss scaler, or None."""
        return self.precision.scaler

    def clip_grad_norm_(
        self, parameters: Any, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Unscale (fp16), then clip the gradients' total norm; return the norm before."""
        if self.gradient_state.sync_gradients:
            for opt in self._optimizers:
                opt.prepare_grads()
        window = StepWindow(self.gradient_state, self.loop_state, self._dataloaders)
        return self.strategy.clip_grad_norm_(parameters, max_norm, norm_type, window=window)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Unscale (fp16), then clamp each gradient to ``[-clip_value, clip_value]``."""
        if self.gradient_state.sync_gradients:
            for opt in self._optimizers:
                opt.prepare_grads()
        self.strategy.clip_grad_value_(parameters, clip_value)

    # --- collectives and process control --------------------------------------------------
    def gather(self, tensor: Any) -> Any:
        """Concatenate ``tensor`` (or a nest of tensors) from every process along dim 0."""
        return ops.gather(tensor, debug=self._debug)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather evaluation outputs: exactly the dataset's samples, in order, no padding."""
        ranks = self.strategy.data_parallel_ranks()
        options = {"use_gather_object": use_gather_object, "debug": self._debug, "ranks": ranks}
        return gather_for_metrics(input_data, self.loop_state, **options)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Sum (or mean) ``tensor`` over the data-parallel processes (every process unless
        tensor parallelism makes several hold the same data), then multiply by ``scale``."""
        group = self.strategy.data_parallel_group()
        out = ops.reduce(tensor, reduction, debug=self._debug, group=group)
        return out if scale == 1.0 else ops.map_tensors(lambda t: t * scale, out)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """Pad ``tensor`` along ``dim`` to the largest size any process holds."""
        return ops.pad_across_processes(tensor, dim, pad_index, pad_first, debug=self._debug)

    def wait_for_everyone(self) -> None:
        self.state.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.state.main_process_first()

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.state.local_main_process_first()

    def on_main_process(self, function: F) -> F:
        """Decorator: run ``function`` on the main process only (others get None)."""
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: F) -> F:
        """Decorator: run ``function`` on each machine's main process only."""
        return self.state.on_local_main_process(function)

    def split_between_processes(
        self, inputs: Any, apply_padding: bool = False
    ) -> contextlib.AbstractContextManager[Any]:
        return self.state.split_between_processes(inputs, apply_padding=apply_padding)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        self.state.print(*args, **kwargs)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader that resumes ``dataloader`` after its first ``num_batches`` batches."""
        return skip_first_batches(dataloader, num_batches)

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object, collect garbage; returns ``objects`` as Nones."""
        self.strategy.teardown()
        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        self.gradient_state.reset()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return [None for _ in objects]

    clear = free_memory

    # --- checkpoints and tracking (implemented in overdrive.checkpoint / overdrive.tracking)
    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The model's full state dict, as the strategy assembles it."""
        return self.strategy.state_dict(model)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and restore ``objects`` (each with state_dict/load_state_dict) in save_state."""
        self._custom_objects.extend(registrable(objects))

    def save_state(self, output_dir: str | None = None, **kwargs: Any) -> Any:
        # deferred: keeps overdrive.checkpoint (safetensors) out of `import overdrive.accelerator`
        from overdrive import checkpoint

        accelerate_layout = self.project_configuration.checkpoint_format == "accelerate"
        kwargs = save_state_kwargs(kwargs, accelerate_layout)
        hooks = self._run_save_state_hooks  # they write into the checkpoint being written
        return checkpoint.save_state(self, output_dir, before_write=hooks, **kwargs)

    def load_state(self, input_dir: str | None = None, **kwargs: Any) -> Any:
        # deferred: keeps overdrive.checkpoint (safetensors) out of `import overdrive.accelerator`
        from overdrive import checkpoint

        kwargs = load_state_kwargs(kwargs)
        self._run_load_state_hooks(input_dir)
        return checkpoint.load_state(self, input_dir, **kwargs)

    def save_model(
        self,
        model: nn.Module,
        save_directory: str,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> Any:
        # deferred: keeps overdrive.checkpoint (safetensors) out of `import overdrive.accelerator`
        from overdrive import checkpoint

        return checkpoint.save_model(
            self,
            model,
            save_directory,
            max_shard_size=max_shard_size,
            safe_serialization=safe_serialization,
        )

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.trackers = tracking.start_trackers(self, project_name, config, init_kwargs or {})

    def log(
        self,
        values: dict[str, Any],
        step: int | None = None,
        log_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not self.trackers and self.is_main_process:
            check_started(self.log_with, self.trackers)  # elsewhere a no-op, as in Accelerate
        for tracker in self.trackers:
            tracker.log(values, step=step, **(log_kwargs or {}).get(tracker.name, {}))

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        return find_tracker(self.trackers, name, unwrap)

    def end_training(self) -> None:
        """Finish an asynchronous save and every tracker, then wait for all processes."""
        # deferred: keeps overdrive.checkpoint (safetensors) out of `import overdrive.accelerator`
        from overdrive.checkpoint.save import wait_for_pending

        wait_for_pending(self)
        for tracker in self.trackers:
            tracker.finish()
        self.wait_for_everyone()
