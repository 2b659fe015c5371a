"""Seeding and capturing the random number generators (python, numpy, torch, CUDA)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from overdrive.environment.process_env import detect_process_env
from overdrive.errors import ConfigError


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return detect_process_env(os.environ).rank


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> int:
    """Seed python, numpy, torch and CUDA; returns the seed used.

    ``device_specific`` adds the process rank so each process draws different numbers;
    ``deterministic`` makes torch pick deterministic kernels (slower, some ops refuse).
    """
    import numpy as np

    if device_specific:
        seed += _rank()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device, lazily
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return seed


def _bytes_state(state: torch.Tensor) -> list[int]:
    values: list[int] = state.tolist()
    return values


def capture_rng_state() -> dict[str, Any]:
    """Every generator's state as JSON-able lists of ints."""
    import numpy as np

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    assert not isinstance(keys, str)
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {
            "name": name,
            "keys": keys.tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": _bytes_state(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_bytes_state(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what ``capture_rng_state`` returned."""
    import numpy as np

    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(
        (
            npy["name"],
            np.asarray(npy["keys"], dtype=np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        )
    )
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


RNG_TYPES = ("torch", "cuda", "generator", "python", "numpy")


def check_rng_types(rng_types: Sequence[str] | None) -> list[str]:
    """``rng_types`` as a list of known names (an unknown name is an error, not ignored)."""
    names = [str(getattr(n, "value", n)).lower() for n in rng_types or ()]
    unknown = [n for n in names if n not in RNG_TYPES]
    if unknown:
        raise ConfigError(
            f"rng_types got {unknown}, which overdrive does not know",
            key="rng_types",
            fix=f"use names from {list(RNG_TYPES)}",
        )
    return names


def synchronize_rng_states(
    rng_types: Sequence[str], generator: torch.Generator | None = None
) -> None:
    """Give every process rank 0's state of each named RNG (one broadcast).

    ``generator`` is the dataloader's own generator ("generator"; skipped when the loader
    has none). "cuda" syncs the current CUDA device's generator when CUDA is in use.
    """
    import numpy as np

    rng_types = check_rng_types(rng_types)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    states: dict[str, Any] = {}
    for name in rng_types:
        if name == "torch":
            states[name] = torch.get_rng_state()
        elif name == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized():
            states[name] = torch.cuda.get_rng_state()
        elif name == "generator" and generator is not None:
            states[name] = generator.get_state()
        elif name == "python":
            states[name] = random.getstate()
        elif name == "numpy":
            states[name] = np.random.get_state()
    box: list[Any] = [states]
    dist.broadcast_object_list(box, src=0)
    for name, value in box[0].items():
        if name == "torch":
            torch.set_rng_state(value)
        elif name == "cuda":
            torch.cuda.set_rng_state(value)
        elif name == "generator" and generator is not None:
            generator.set_state(value)
        elif name == "python":
            random.setstate(value)
        elif name == "numpy":
            np.random.set_state(value)


def snapshot_streams(generator: torch.Generator | None = None) -> dict[str, Any]:
    """The CPU streams an object might draw from (torch, python, numpy, and ``generator``),
    JSON-able; see ``streams_at``."""
    state = capture_rng_state()
    state.pop("cuda", None)
    if generator is not None:
        state["generator"] = _bytes_state(generator.get_state())
    return state


@contextmanager
def streams_at(
    snapshot: dict[str, Any], generator: torch.Generator | None = None
) -> Iterator[None]:
    """Run the block with the streams as ``snapshot`` recorded them, then put back the
    states they had before: what the block draws leaves no trace on them."""
    import numpy as np

    before = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    gen_before = generator.get_state() if generator is not None else None
    try:
        restore_rng_state(snapshot)
        if generator is not None and "generator" in snapshot:
            generator.set_state(torch.tensor(snapshot["generator"], dtype=torch.uint8))
        yield
    finally:
        torch.set_rng_state(before[0])
        random.setstate(before[1])
        np.random.set_state(before[2])
        if generator is not None and gen_before is not None:
            generator.set_state(gen_before)
