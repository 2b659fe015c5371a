"""What pipeline parallelism cannot run with yet, refused from the settings alone.

Torch-free and called from ``layout_from_settings``, so ``overdrive config validate``, the
launcher's preflight and every worker refuse the same settings with the same message, the
first two before any worker starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from overdrive.errors import ConfigError

PP_KEY = "megatron_lm_config.pp_degree"

# (setting, what it cannot be, the fix)
RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    (
        "mixed_precision",
        lambda v: v == "fp16",
        "use bf16 (fp16 loss scaling inside the schedule is not available yet)",
    ),
    (
        "megatron_lm_config.use_distributed_optimizer",
        bool,
        "turn it off (the replicas of each stage keep whole optimizer states: sharding "
        "them under a pipeline is not available yet)",
    ),
    (
        "dynamo_config.dynamo_backend",
        lambda v: v not in (None, "no"),
        "set dynamo_backend to no (compiling a model whose call runs a pipeline "
        "schedule is not available yet)",
    ),
)


def check_pipeline_settings(settings: Any, degree: int) -> None:
    """Raise naming the first setting that cannot run under a pipeline of ``degree`` stages."""
    if degree <= 1:
        return
    for key, bad, fix in RULES:
        value = settings[key]
        if bad(value):
            raise ConfigError(
                f"{key} = {value} ({settings.source(key)}) cannot run with pipeline "
                f"parallelism ({PP_KEY} = {degree}, from {settings.source(PP_KEY)}) yet",
                key=key,
                fix=fix,
            )
