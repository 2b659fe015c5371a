"""Keyword-argument handlers, as in Hugging Face Accelerate, passed as ``Accelerator(kwargs_handlers=[...])``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from typing import Any

from overdrive.arguments.enums import DDPCommunicationHookType as Hook
from overdrive.errors import ConfigError


class KwargsHandler:
    """Base: ``to_kwargs()`` returns only the fields changed from their defaults."""

    def to_kwargs(self) -> dict[str, Any]:
        default = type(self)()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != getattr(default, f.name)
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Dynamic loss scaling for fp16 (``torch.amp.GradScaler``)."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.init_scale <= 0:
            raise ConfigError(
                f"GradScalerKwargs(init_scale={self.init_scale}) must be > 0",
                key="init_scale",
                fix="use a positive init_scale such as 65536.0",
            )
        if self.growth_factor <= 1.0:
            raise ConfigError(
                f"GradScalerKwargs(growth_factor={self.growth_factor}) must be > 1",
                key="growth_factor",
                fix="use a growth_factor above 1, such as 2.0",
            )
        if not 0.0 < self.backoff_factor < 1.0:
            raise ConfigError(
                f"GradScalerKwargs(backoff_factor={self.backoff_factor}) must be between 0 and 1",
                key="backoff_factor",
                fix="use a backoff_factor such as 0.5",
            )
        if self.growth_interval < 1:
            raise ConfigError(
                f"GradScalerKwargs(growth_interval={self.growth_interval}) must be >= 1",
                key="growth_interval",
                fix="use a positive growth_interval such as 2000",
            )


@dataclass
class AutocastKwargs(KwargsHandler):
    """Arguments for ``torch.autocast``."""

    enabled: bool = True
    cache_enabled: bool | None = None


# Fields of DistributedDataParallelKwargs that choose a communication hook, not DDP arguments.
COMM_HOOK_FIELDS = ("comm_hook", "comm_wrapper", "comm_state_option")


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments for ``torch.nn.parallel.DistributedDataParallel``.

    ``comm_hook`` ("fp16", "bf16", "power_sgd", "batched_power_sgd") compresses gradients
    as they are all-reduced; ``comm_wrapper`` ("fp16", "bf16") wraps a PowerSGD hook;
    ``comm_state_option`` passes PowerSGD's options (``matrix_approximation_rank``, ...).
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: str = "no"
    comm_wrapper: str = "no"
    comm_state_option: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.comm_hook = _hook_name(self.comm_hook, "comm_hook", [h.value for h in Hook])
        self.comm_wrapper = _hook_name(self.comm_wrapper, "comm_wrapper", ["no", "fp16", "bf16"])
        powersgd = self.comm_hook in ("power_sgd", "batched_power_sgd")
        if self.comm_wrapper != "no" and not powersgd:
            raise ConfigError(
                f"DistributedDataParallelKwargs(comm_wrapper={self.comm_wrapper!r}) wraps a "
                f"PowerSGD hook, but comm_hook is {self.comm_hook!r}",
                key="comm_wrapper",
                fix="set comm_hook='power_sgd' (or 'batched_power_sgd'), or drop comm_wrapper",
            )
        if self.comm_state_option and not powersgd:
            raise ConfigError(
                "DistributedDataParallelKwargs(comm_state_option=...) holds PowerSGD options, "
                f"but comm_hook is {self.comm_hook!r}",
                key="comm_state_option",
                fix="set comm_hook='power_sgd' (or 'batched_power_sgd'), or drop comm_state_option",
            )

    def ddp_kwargs(self) -> dict[str, Any]:
        """The changed fields that ``DistributedDataParallel`` itself takes."""
        return {k: v for k, v in self.to_kwargs().items() if k not in COMM_HOOK_FIELDS}


def _hook_name(value: Any, key: str, allowed: list[str]) -> str:
    name = str(getattr(value, "value", value)).lower()
    if name not in allowed:
        raise ConfigError(
            f"DistributedDataParallelKwargs({key}={value!r}) is not a known hook",
            key=key,
            fix=f"use one of {allowed} (DDPCommunicationHookType)",
        )
    return name


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Arguments for ``torch.distributed.init_process_group``; backend None picks gloo or nccl."""

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None and not isinstance(self.timeout, timedelta):
            raise ConfigError(
                f"InitProcessGroupKwargs(timeout={self.timeout!r}) must be a datetime.timedelta",
                key="timeout",
                fix="pass timeout=datetime.timedelta(seconds=...)",
            )
        if self.backend is not None and self.backend not in (
            "gloo",
            "nccl",
            "mpi",
            "ucc",
            "xccl",
            "cpu:gloo,cuda:nccl",
        ):
            raise ConfigError(
                f"InitProcessGroupKwargs(backend={self.backend!r}) is not a known backend",
                key="backend",
                fix="use 'gloo' (CPU), 'nccl' (CUDA) or leave backend=None to choose automatically",
            )


@dataclass
class SchedulerKwargs(KwargsHandler):
    """How a prepared LR scheduler advances per optimizer step.

    By default it advances ``num_processes`` times per optimizer step unless batches are
    split, as Hugging Face Accelerate does: schedules sized from the unprepared dataloader
    (as its examples do) then end when training ends. ``once_per_optimizer_step=True``
    advances it exactly once per optimizer step, so a schedule sized in optimizer steps
    lasts that many steps whatever the number of processes.
    """

    once_per_optimizer_step: bool = False


_PROFILER_ACTIVITIES = ("cpu", "cuda", "xpu", "mtia", "hpu")


@dataclass
class ProfileKwargs(KwargsHandler):
    """Settings for ``torch.profiler.profile``, used by ``Accelerator.profile()``.

    ``activities`` names what to record ("cpu", "cuda"; default: cpu, and cuda when it is
    used); ``schedule_option`` is ``torch.profiler.schedule``'s arguments (``wait``,
    ``warmup``, ``active``, ``repeat``, ``skip_first``); ``output_trace_dir`` receives one
    Chrome trace per process, ``profile_<rank>.json``.
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Any = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def __post_init__(self) -> None:
        unknown = [a for a in self.activities or () if str(a).lower() not in _PROFILER_ACTIVITIES]
        if unknown:
            raise ConfigError(
                f"ProfileKwargs(activities={self.activities!r}): {unknown} unknown",
                key="activities",
                fix=f"use names from {list(_PROFILER_ACTIVITIES)}",
            )

    def build(self) -> Any:
        """A ``torch.profiler.profile`` with these settings (not started)."""
        import torch

        names = self.activities
        if names is None:
            names = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
        activities = [getattr(torch.profiler.ProfilerActivity, str(n).upper()) for n in names]
        schedule = torch.profiler.schedule(**self.schedule_option) if self.schedule_option else None
        return torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            with_modules=self.with_modules,
        )
