"""``accelerate.utils.random``: seeding and synchronising random number generators."""

from __future__ import annotations

from typing import Any

import torch

from overdrive.processes.random_state import set_seed, synchronize_rng_states

__all__ = ["set_seed", "synchronize_rng_state", "synchronize_rng_states"]


def synchronize_rng_state(rng_type: Any = None, generator: torch.Generator | None = None) -> None:
    """Give every process rank 0's state of one generator: ``rng_type`` is an ``RNGType`` or
    its name ("torch", "cuda", "numpy", "python", "generator"; the last one syncs
    ``generator``). Generators of devices overdrive does not run on are refused by name."""
    if rng_type is None:
        raise ValueError("synchronize_rng_state needs rng_type, e.g. RNGType.TORCH or 'generator'")
    name = str(getattr(rng_type, "value", rng_type)).lower()
    if name == "generator" and generator is None:
        raise ValueError("Need a generator to synchronize its seed.")
    synchronize_rng_states([name], generator=generator)
