"""``MegatronLMDummyScheduler``: Hugging Face Accelerate's stand-in for a scheduler Megatron-LM
builds itself. overdrive's tensor and pipeline parallelism use torch schedulers, so a script
that makes one only on its Megatron path imports fine; stepping one is refused."""

from __future__ import annotations

from typing import Any

from overdrive.ds.dummies import SchedulerArguments
from overdrive.errors import ConfigError


class MegatronLMDummyScheduler(SchedulerArguments):
    """Holds the arguments a Megatron-LM scheduler would be built from (not a DeepSpeed
    ``DummyScheduler``: the DeepSpeed strategy must not take it for its own)."""

    def step(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigError(
            "MegatronLMDummyScheduler stands for a scheduler Megatron-LM builds, and overdrive "
            "runs no Megatron-LM",
            key="scheduler",
            fix="use a torch scheduler (e.g. torch.optim.lr_scheduler.LambdaLR); overdrive's "
            "tensor and pipeline parallelism (tp_degree, pp_degree) step it as usual",
        )

    def state_dict(self) -> dict[str, Any]:
        return {}
