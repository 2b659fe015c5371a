"""Generated training programs: each is a choice of every construct ``program.py`` knows.

A program is a plain dict (JSON); ``generate(seed, nprocs)`` draws one from the grammar
below, ``DEFAULTS`` is the smallest program, and ``shrink`` walks a failing program back
toward it one choice at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

# The smallest program: one epoch of plain steps, nothing else.
DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "n": 8,
    "batch_size": 2,
    "epochs": 1,
    "dataset": "map",
    "sampler": "default",
    "shuffle": False,
    "drop_last": False,
    "noisy_data": False,
    "noisy_collate": False,
    "dropout": 0.0,
    "accum": 1,
    "use_accumulate": True,
    "clip": None,
    "scheduler": None,
    "step_scheduler_with_optimizer": True,
    "split_batches": False,
    "dispatch_batches": None,
    "even_batches": True,
    "use_seedable_sampler": False,
    "mixed_precision": "no",
    "device_specific": False,
    "metrics": False,
    "tracker": False,
    "project": False,
    "automatic_naming": False,
    "total_limit": None,
    "resume_at": None,
    "steps_after_save": 0,
    "resume_skip": "none",
}


def generate(seed: int, nprocs: int) -> dict[str, Any]:
    """Program number ``seed`` of the grammar, for a world of ``nprocs`` processes."""
    r = random.Random(seed * 7919 + nprocs)
    p = dict(DEFAULTS)
    p["seed"] = r.randrange(1000)
    p["epochs"] = r.choice([1, 2, 2])
    p["dataset"] = r.choice(["map", "map", "map", "iterable"])
    if p["dataset"] == "map":
        samplers = ["default", "default", "default", "custom_sampler"]
        if nprocs == 1:  # batches of varying sizes crash Accelerate's gloo gathers on 2
            samplers.append("custom_batch_sampler")
        p["sampler"] = r.choice(samplers)
    if p["sampler"] == "default" and p["dataset"] == "map":
        p["shuffle"] = r.random() < 0.7
        p["drop_last"] = r.random() < 0.2
        p["use_seedable_sampler"] = r.random() < 0.4
    p["split_batches"] = p["sampler"] != "custom_batch_sampler" and r.random() < 0.25
    step = nprocs if p["split_batches"] else 1
    p["batch_size"] = step * r.randint(1, 3)
    p["n"] = r.randint(3, 9) * nprocs + r.randrange(nprocs + 1) * r.randint(0, 1)
    p["noisy_data"] = r.random() < 0.3
    p["noisy_collate"] = r.random() < 0.3
    p["dropout"] = r.choice([0.0, 0.0, 0.2])
    p["accum"] = r.choice([1, 1, 2, 3])
    p["use_accumulate"] = r.random() < 0.8
    p["clip"] = r.choice([None, None, "norm", "value"])
    p["scheduler"] = r.choice([None, "per_batch", "per_epoch"])
    p["step_scheduler_with_optimizer"] = r.random() < 0.7
    if nprocs > 1:
        p["dispatch_batches"] = r.choice([None, None, True, False])
        p["even_batches"] = r.random() < 0.8
        if not p["even_batches"]:
            # uneven shares would leave one process waiting in DDP's backward, under
            # Hugging Face Accelerate as under overdrive: every process gets whole batches
            p["n"] = (p["n"] // (p["batch_size"] * nprocs) + 1) * p["batch_size"] * nprocs
    p["mixed_precision"] = r.choice(["no", "no", "no", "bf16"])
    p["device_specific"] = r.random() < 0.3
    p["metrics"] = r.random() < 0.4
    p["project"] = r.random() < 0.4
    if p["project"]:
        p["automatic_naming"] = r.random() < 0.6
        p["total_limit"] = r.choice([None, 1, 2]) if p["automatic_naming"] else None
        p["tracker"] = r.random() < 0.3
    if r.random() < 0.5:
        p["resume_at"] = r.randint(1, 6)
        p["steps_after_save"] = r.choice([0, 0, 1, 2])
        p["resume_skip"] = r.choice(["skip_first_batches", "manual", "none"])
    # fp16 last, so the draws above (and the programs they made before it) stay as they were
    if p["mixed_precision"] == "no" and r.random() < 0.2:
        p["mixed_precision"] = "fp16"
    return p


def shrink(
    program: dict[str, Any], still_fails: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The program with every choice that is not needed for the failure set to its default."""
    current = dict(program)
    changed = True
    while changed:
        changed = False
        for key, default in DEFAULTS.items():
            if key == "seed" or current.get(key) == default:
                continue
            trial = dict(current, **{key: default})
            if still_fails(trial):
                current, changed = trial, True
    return current
