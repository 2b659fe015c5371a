"""The context-parallel degree and what it cannot run with, refused from the settings alone.

Torch-free and called from ``layout_from_settings``, so ``overdrive config validate``, the
launcher's preflight and every worker refuse the same settings with the same message, the
first two before any worker starts. What only the model or the batch can tell (SDPA
attention, a sequence length the ring can split) is refused where they are seen, by
``parallel/context_parallel.py``.

As in Hugging Face Accelerate, context parallelism runs under FSDP2: the ``cp`` ranks of one
data-parallel rank read the same batch, each attends over its slice of the sequence, and
FSDP2 shards and reduces the gradients over ``dp_shard`` x ``cp`` flattened
(``dp_shard_cp``), which averages each data-parallel rank's slices into its whole-sequence
gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError
from overdrive.parallel.degree_rules import Rule, refuse_by_rules, refuse_not_dividing

if TYPE_CHECKING:
    from overdrive.config.settings import Settings

CP_KEY = "parallelism_config.parallelism_config_cp_size"
CP_COMM_KEY = "parallelism_config.parallelism_config_cp_comm_strategy"
SP_KEY = "parallelism_config.parallelism_config_sp_size"

# (setting, what it cannot be given the settings, the fix): checked in this order
RULES: tuple[Rule, ...] = (
    (
        "distributed_type",
        lambda v, s: v != DistributedType.FSDP,
        "use distributed_type FSDP with fsdp_version 2 (--use_fsdp --fsdp_version 2): the "
        "context-parallel ranks' gradients are reduced by FSDP2 over dp_shard x cp, as "
        "Hugging Face Accelerate does",
    ),
    (
        "fsdp_config.fsdp_version",
        lambda v, s: v != 2,
        "set fsdp_version 2 (--fsdp_version 2): context parallelism shards with fully_shard "
        "over dp_shard x cp",
    ),
    (
        "fsdp_config.fsdp_sharding_strategy",
        lambda v, s: v == "NO_SHARD",
        "use FULL_SHARD, SHARD_GRAD_OP or HYBRID_SHARD: FSDP2 shards over dp_shard x cp "
        "(Hugging Face Accelerate refuses context parallelism with pure replication too)",
    ),
    (
        SP_KEY,
        lambda v, s: isinstance(v, int) and v > 1,
        "set one of them to 1: context and sequence parallelism split the same dimension",
    ),
    (
        "dynamo_config.dynamo_backend",
        lambda v, s: v not in (None, "no"),
        "set dynamo_backend to no (compiling the ring attention that replaces SDPA inside "
        "maybe_context_parallel is not available yet)",
    ),
)


def cp_setting(settings: Settings) -> int:
    """The context-parallel degree the settings ask for (1 when unset)."""
    return int(settings[CP_KEY] or 1) if settings.is_set(CP_KEY) else 1


def cp_degree(settings: Settings, world: int, others: dict[str, tuple[int, str]]) -> int:
    """The context-parallel degree on ``world`` processes, after the first setting that
    cannot run with it is refused. ``others``: the degree and the key of every other model
    dimension already decided (``tp``, ``pp``), which context parallelism does not compose
    with yet."""
    cp = cp_setting(settings)
    if cp <= 1:
        return 1
    source = settings.source(CP_KEY)
    refuse_by_rules(RULES, settings, what="context", asked_by=f"{CP_KEY} = {cp}, from {source}")
    for name, (degree, key) in others.items():
        if degree > 1:
            raise ConfigError(
                f"{name} degree {degree} ({key}, from {settings.source(key)}) cannot run with "
                f"context parallelism ({CP_KEY} = {cp}, from {source}) yet",
                key=key,
                fix=f"set one of {key} and {CP_KEY} to 1",
            )
    refuse_not_dividing(cp, world, what="context-parallel", key=CP_KEY, source=source)
    return cp


def check_sequence_length(length: int, cp: int, source: str, what: str = "the buffer") -> None:
    """Refuse a sequence the ring cannot split: each of the ``cp`` ranks holds two chunks
    (head and tail, for causal load balance), so the length must divide by ``2 * cp``."""
    if length % (2 * cp):
        raise ConfigError(
            f"{what} has a sequence of {length} tokens, which context parallelism "
            f"({CP_KEY} = {cp}, from {source}) cannot split: each of the {cp} ranks holds two "
            f"equal chunks, so the length must be a multiple of {2 * cp}",
            key=CP_KEY,
            fix=f"pad the sequences to a multiple of {2 * cp} (e.g. {2 * cp * -(-length // (2 * cp))} "
            "tokens, with labels -100 on the padding), or change the context-parallel degree",
        )
