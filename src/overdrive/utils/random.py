"""``accelerate.utils.random``: seeding and synchronising random number generators."""

from __future__ import annotations

from overdrive.random_state import set_seed, synchronize_rng_states

__all__ = ["set_seed", "synchronize_rng_states"]
