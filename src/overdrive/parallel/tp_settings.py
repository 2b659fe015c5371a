"""``TPSettings``: what the settings ask of tensor and sequence parallelism. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TPSettings:
    """The degree, where it was set (``key``, ``source``), a plan given in code, and whether
    sequence parallelism was asked for (``sp_key``, ``sp_source``: where)."""

    degree: int
    key: str
    source: str
    plan: dict[str, str] | None = None
    sequence_parallel: bool = False
    sp_key: str = "megatron_lm_config.sequence_parallelism"
    sp_source: str = "default"
