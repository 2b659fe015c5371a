"""Keyword-argument handlers (seed 000, table 3) passed as ``Accelerator(kwargs_handlers=[...])``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from typing import Any

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


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments for ``torch.nn.parallel.DistributedDataParallel``."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False


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
