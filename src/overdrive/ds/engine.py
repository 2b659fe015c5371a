"""Starting DeepSpeed: importing it for the right device, fitting the optimizer to ZeRO-Offload,
and building the engine with one ``deepspeed.initialize`` call."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Protocol, cast

import torch
from torch import nn

from overdrive.ds.config import DeepSpeedConfig
from overdrive.ds.dummies import DummyOptim, DummyScheduler
from overdrive.errors import ConfigError

LOGGER = "overdrive.deepspeed"


class DeepSpeedEngine(Protocol):
    """What overdrive uses of the engine ``deepspeed.initialize`` builds (an ``nn.Module``
    wrapping the model)."""

    module: nn.Module
    basic_optimizer: torch.optim.Optimizer  # the optimizer it steps
    optimizer: object  # its ZeRO (or fp16) wrapper around that one
    lr_scheduler: object

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None: ...

    def backward(self, loss: torch.Tensor, /, **kwargs: object) -> object: ...

    def step(self) -> object: ...

    def was_step_applied(self) -> bool: ...

    def get_global_grad_norm(self) -> float | None: ...

    def fp16_enabled(self) -> bool: ...

    def destroy(self) -> object: ...

    def compile(self, backend: str, compile_kwargs: dict[str, object]) -> None: ...


class _Scheduler(Protocol):
    """What ``EngineScheduler`` forwards to the scheduler DeepSpeed built."""

    def state_dict(self) -> Mapping[str, object]: ...

    def load_state_dict(self, state: Mapping[str, object], /) -> None: ...

    def get_last_lr(self) -> list[float]: ...


def say(text: str, level: int = logging.INFO) -> None:
    """Report on the main process: to the application's logging if it handles the
    ``overdrive.deepspeed`` logger, else to standard error (as the effective settings are)."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() != 0:
        return
    logger = logging.getLogger(LOGGER)
    if logger.hasHandlers():
        logger.log(level, text)
        return
    prefix = "overdrive: warning: " if level >= logging.WARNING else "overdrive: "
    sys.stderr.write(prefix + text + "\n")
    sys.stderr.flush()


def import_deepspeed(device: torch.device) -> ModuleType:
    """``deepspeed``, set up for ``device``: on CPU processes DeepSpeed's CPU accelerator."""
    wanted = "cpu" if device.type == "cpu" else device.type
    if wanted == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
    except ImportError as exc:
        raise ConfigError(
            f"distributed_type DEEPSPEED needs the deepspeed package, which cannot be imported "
            f"({exc})",
            key="distributed_type",
            fix="pip install 'overdrive[deepspeed]' (or deepspeed>=0.16)",
        ) from None
    import torch.distributed as dist

    if dist.is_initialized():  # DeepSpeed's comm layer on the process group we already run
        deepspeed.init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)
    name = get_accelerator().device_name()
    if name != wanted:
        raise ConfigError(
            f"DeepSpeed runs on its {name!r} accelerator but this process trains on {device} "
            f"(DS_ACCELERATOR={os.environ.get('DS_ACCELERATOR', 'unset')})",
            key="use_cpu",
            fix="set DS_ACCELERATOR=cpu for CPU processes (overdrive launch does), or unset it "
            "on GPU machines; import deepspeed only after creating the Accelerator",
        )
    return cast(ModuleType, deepspeed)  # deepspeed ships no type information


def check_precision(cfg: DeepSpeedConfig, device: torch.device) -> None:
    """fp16 needs an accelerator that has it (most CPUs have none)."""
    if cfg.mixed_precision != "fp16" or device.type != "cpu":
        return
    from deepspeed.accelerator import get_accelerator

    if not get_accelerator().is_fp16_supported():
        raise ConfigError(
            "mixed_precision fp16 with DeepSpeed: DeepSpeed's CPU accelerator has no fp16 on "
            "this CPU",
            key="mixed_precision",
            fix="rehearse with bf16 (or no mixed precision) on CPU processes; fp16 runs on GPUs",
        )


def check_offload(cfg: DeepSpeedConfig) -> None:
    """NVMe offload needs a path and DeepSpeed's async I/O op (libaio); without them DeepSpeed
    stops deep inside ``initialize``, after the model is built."""
    targets = {
        "zero_optimization.offload_optimizer": cfg.offload_optimizer,
        "zero_optimization.offload_param": cfg.offload_param,
    }
    for section, device in targets.items():
        if device != "nvme":
            continue
        where = cfg.sources.get(f"{section}.device", cfg.origin)
        key = "deepspeed_config." + section.rsplit(".", 1)[1] + "_device"
        path = cfg.get(f"{section}.nvme_path")
        if not path or not os.path.isdir(str(path)):
            raise ConfigError(
                f"{key} is nvme ({where}) but its nvme_path is "
                + (f"{path!r}, which is not a directory" if path else "not set"),
                key=key,
                fix=f"set {key.replace('_device', '_nvme_path')} to a directory on a fast local "
                "disk, or offload to cpu",
            )
        from deepspeed.ops.op_builder import AsyncIOBuilder

        if not AsyncIOBuilder().is_compatible(verbose=False):
            raise ConfigError(
                f"{key} is nvme ({where}), which needs DeepSpeed's async I/O op, and it cannot "
                "be built here (libaio and its headers are missing)",
                key=key,
                fix="install libaio (e.g. apt install libaio-dev) and reinstall deepspeed, or "
                "offload to cpu",
            )


def fit_optimizer(optimizer: object, cfg: DeepSpeedConfig, config: dict[str, object]) -> object:
    """The optimizer DeepSpeed should step: under ZeRO-Offload a torch Adam/AdamW becomes
    DeepSpeed's CPU Adam (same update, same parameter groups and hyper-parameters)."""
    if optimizer is None or isinstance(optimizer, DummyOptim) or cfg.offload_optimizer == "none":
        return optimizer
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    if isinstance(optimizer, DeepSpeedCPUAdam):
        return optimizer
    kind = type(optimizer)
    if kind in (torch.optim.Adam, torch.optim.AdamW):
        torch_optimizer = cast(torch.optim.Optimizer, optimizer)  # an Adam or AdamW
        group = torch_optimizer.param_groups[0]
        unsupported = [k for k in ("amsgrad", "maximize") if group.get(k)]
        if unsupported:
            raise ConfigError(
                f"offload_optimizer_device {cfg.offload_optimizer}: the {kind.__name__} has "
                f"{', '.join(unsupported)} on, which DeepSpeed's CPU Adam cannot run",
                key="deepspeed_config.offload_optimizer_device",
                fix="turn it off, or train without optimizer offload",
            )
        decoupled = kind is torch.optim.AdamW or bool(group.get("decoupled_weight_decay"))
        mapped = DeepSpeedCPUAdam(
            torch_optimizer.param_groups,  # the same group dicts: a scheduler on them still acts
            lr=group["lr"],
            betas=group["betas"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            adamw_mode=decoupled,
        )
        say(
            f"offload_optimizer_device {cfg.offload_optimizer}: your {kind.__name__} runs as "
            "DeepSpeed's CPU Adam (DeepSpeedCPUAdam, the same update rule, parameter groups "
            "and hyper-parameters), since ZeRO-Offload steps the optimizer on the CPU"
        )
        return mapped
    config["zero_force_ds_cpu_optimizer"] = False
    say(
        f"offload_optimizer_device {cfg.offload_optimizer}: your {kind.__name__} has no DeepSpeed "
        "CPU version; it runs as it is on the CPU (slower than DeepSpeed's CPU Adam)",
        logging.WARNING,
    )
    return optimizer


def initialize(
    deepspeed: ModuleType,
    model: torch.nn.Module,
    optimizer: object,
    config: dict[str, object],
    scheduler: object = None,
) -> DeepSpeedEngine:
    """One ``deepspeed.initialize`` call; returns the engine (which holds everything).

    A ``DummyScheduler`` with ``lr_scheduler_callable`` hands DeepSpeed that callable, which
    builds the scheduler around the optimizer the engine steps.
    """
    kwargs: dict[str, object] = {"model": model, "config": config, "dist_init_required": False}
    build_scheduler = getattr(scheduler, "lr_scheduler_callable", None)
    if isinstance(scheduler, DummyScheduler) and build_scheduler is not None:
        kwargs["lr_scheduler"] = build_scheduler
    if isinstance(optimizer, DummyOptim):
        kwargs["model_parameters"] = optimizer.params
    elif optimizer is not None:
        kwargs["optimizer"] = optimizer
    with _quiet_torch_warnings():
        engine, *_ = deepspeed.initialize(**kwargs)
    return cast(DeepSpeedEngine, engine)


@contextlib.contextmanager
def _quiet_torch_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
        yield


class EngineScheduler:
    """The scheduler DeepSpeed built from its config's ``scheduler`` section.

    The engine advances it inside its own step, so ``step()`` here does nothing; its state is
    saved and restored with the checkpoint like any scheduler's.
    """

    def __init__(self, scheduler: object) -> None:
        self.scheduler = cast(_Scheduler, scheduler)  # DeepSpeed's, or one its callable built
        self.optimizer: object = getattr(scheduler, "optimizer", None)

    def step(self, *args: object, **kwargs: object) -> None:
        return None  # advanced by the engine's step

    def state_dict(self) -> dict[str, object]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.scheduler.load_state_dict(state)

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def __getattr__(self, name: str) -> object:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)


class HfZero3Config:
    """What transformers' ``from_pretrained``/``from_config`` read to build a model already
    partitioned under ZeRO-3 (``is_zero3()`` and ``config``); registered while alive."""

    def __init__(self, config: dict[str, object]) -> None:
        self.config = config

    def is_zero3(self) -> bool:
        return True

    def is_offload(self) -> bool:
        return False

    def register(self) -> bool:
        """Tell transformers (when installed) to build models under ``deepspeed.zero.Init``."""
        import importlib.util

        if importlib.util.find_spec("transformers") is None:
            return False
        from transformers.integrations import deepspeed as hf_deepspeed

        hf_deepspeed.set_hf_deepspeed_config(self)
        return True

    @staticmethod
    def unregister() -> None:
        module = sys.modules.get("transformers.integrations.deepspeed")
        if module is not None:
            module.unset_hf_deepspeed_config()
