"""What pipeline parallelism cannot run with yet, refused from the settings alone.

Torch-free and called from ``layout_from_settings``, so ``overdrive config validate``, the
launcher's preflight and every worker refuse the same settings with the same message, the
first two before any worker starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.parallel.degree_rules import Rule, refuse_by_rules

if TYPE_CHECKING:
    from overdrive.config.settings import Settings

# (setting, what it cannot be given the settings, the fix)
RULES: tuple[Rule, ...] = (
    (
        "distributed_type",
        lambda v, s: v == DistributedType.DEEPSPEED,
        "use FSDP (fsdp_version 2) or MEGATRON_LM with a pipeline; DeepSpeed's own pipeline "
        "engine is not driven by overdrive",
    ),
    (
        "fsdp_config.fsdp_version",
        lambda v, s: requested_backend(s) is DistributedType.FSDP and v == 1,
        "set fsdp_version 2 (each pipeline stage is sharded with fully_shard)",
    ),
    (
        "mixed_precision",
        lambda v, s: v == "fp16",
        "use bf16 (fp16 loss scaling inside the schedule is not available yet)",
    ),
    (
        "megatron_lm_config.use_distributed_optimizer",
        lambda v, s: bool(v),
        "turn it off (the replicas of each stage keep whole optimizer states: sharding "
        "them under a pipeline is not available yet)",
    ),
    (
        "megatron_lm_config.sequence_parallelism",
        lambda v, s: requested_backend(s) is DistributedType.MEGATRON_LM and v is True,
        "turn it off (sequence-parallel activations between pipeline stages are not available yet)",
    ),
    (
        "dynamo_config.dynamo_backend",
        lambda v, s: v not in (None, "no"),
        "set dynamo_backend to no (compiling a model whose call runs a pipeline "
        "schedule is not available yet)",
    ),
)


def check_pipeline_settings(settings: Settings, degree: int, pp_key: str) -> None:
    """Raise naming the first setting that cannot run under a pipeline of ``degree`` stages
    (set by ``pp_key``)."""
    if degree <= 1:
        return
    asked_by = f"{pp_key} = {degree}, from {settings.source(pp_key)}"
    refuse_by_rules(RULES, settings, what="pipeline", asked_by=asked_by, suffix=" yet")
