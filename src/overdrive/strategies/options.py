"""What choosing a strategy reads besides the settings: the process (``ProcessInfo``) and the
values the plugins give in code, which settings cannot hold (``StrategyOptions``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs
    from overdrive.parallel.decide import Decision


class ProcessInfo(Protocol):
    """The process state a strategy is chosen for (``PartialState`` is one)."""

    @property
    def num_processes(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def decision(self) -> Decision: ...


@dataclass(frozen=True)
class StrategyOptions:
    """The in-code values, gathered once from the ``Accelerator``'s handlers and plugins.

    ``ddp_kwargs``: ``DistributedDataParallelKwargs``. ``fsdp_wrap``: a callable wrap policy
    (``FullyShardedDataParallelPlugin(auto_wrap_policy=...)``). ``ds_config``: what
    ``DeepSpeedPlugin(hf_ds_config=...)`` holds (a config dict, an ``HfDeepSpeedConfig`` or
    transformers' ``HfTrainerDeepSpeedConfig``). ``tp_plan`` and ``sequence_parallel``:
    ``ParallelismConfig(tp_plan=..., sequence_parallel=True)``. ``pp_loss_fn`` and
    ``pp_split_points``: the pipeline's loss and stage starts (``ParallelismConfig(pp_...)``
    or ``MegatronLMPlugin(pipeline_...)``).
    """

    ddp_kwargs: DistributedDataParallelKwargs | None = None
    fsdp_wrap: Callable[..., object] | None = None
    ds_config: object = None
    tp_plan: dict[str, str] | None = None
    sequence_parallel: bool = False
    pp_loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    pp_split_points: list[int] | None = None


NO_OPTIONS = StrategyOptions()
