"""Checkpoints in Hugging Face Accelerate's ``save_state`` layout, read without running code.

Its layout: ``model[_i].safetensors`` or ``pytorch_model[_i].bin``, ``optimizer[_i].bin``,
``scheduler[_i].bin``, ``scaler.pt``, ``random_states_<rank>.pkl``,
``custom_checkpoint_<i>.pkl`` (and ``sampler[_i].bin``/``dl_state_dict[_i].bin`` for some
loaders). Every file is read as Accelerate 1.15 reads it, with ``torch.load(weights_only=True)``
and the same narrow allowlist (numpy arrays and dtypes, which its RNG states hold): tensors,
numbers, strings and plain containers are rebuilt, nothing the file names is called. A file
that needs more is refused with the fix (``allow_unsafe_pickle=True`` for a trusted file).

What is restored is what Accelerate's ``load_state`` restores: models, optimizers,
schedulers, the loss scaler, registered objects and this process's random streams. Prepared
dataloaders are left where they are (their next iteration starts a new epoch and the script
skips what it trained on), as there.
"""

from __future__ import annotations

import logging
import pickle
import random
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from overdrive.checkpoint.errors import CheckpointMismatchError, UnsafeCheckpointError
from overdrive.checkpoint.layout import MANIFEST
from overdrive.checkpoint.parts import Stateful
from overdrive.checkpoint.serialization import PICKLE_SUFFIXES, load_tensors, load_weights_only

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost

_log = logging.getLogger("overdrive.checkpoint")


def _pickles(path: Path) -> list[str]:
    return sorted(f.name for f in path.iterdir() if f.suffix in PICKLE_SUFFIXES)


def looks_legacy(path: Path) -> bool:
    """No overdrive marker, but pickle files: a checkpoint from Hugging Face Accelerate."""
    return not (path / MANIFEST).exists() and bool(_pickles(path))


def _suffix(i: int) -> str:
    return "" if i == 0 else f"_{i}"


def _model_file(path: Path, i: int) -> Path | None:
    for name in (f"model{_suffix(i)}.safetensors", f"pytorch_model{_suffix(i)}.bin"):
        if (path / name).exists():
            return path / name
    return None


def read_file(file: Path, *, what: str, allow_unsafe_pickle: bool) -> Any:
    """One file of the layout: ``weights_only`` with Accelerate's allowlist; with
    ``allow_unsafe_pickle`` a file that needs more is unpickled in full."""
    if allow_unsafe_pickle:
        return torch.load(file, map_location="cpu", weights_only=False)
    try:
        return load_weights_only(file, map_location="cpu")
    except pickle.UnpicklingError as exc:
        named = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        reason = f"it names {named.group(1)}" if named else "it is not plain data"
        raise UnsafeCheckpointError(
            f"load_state: {what}: {file} holds more than tensors, numbers and numpy arrays "
            f"({reason}); unpickling it would run code the file names, so overdrive does not\n"
            "  fix: if you wrote it yourself and trust it, pass allow_unsafe_pickle=True to "
            "load_state"
        ) from None


def load_accelerate_layout(
    accelerator: CheckpointHost, path: Path, allow_unsafe_pickle: bool = False
) -> None:
    """Restore a checkpoint in Hugging Face Accelerate's layout into the prepared objects."""
    wanted: list[tuple[str, Path | None, Stateful]] = []
    for i, model in enumerate(accelerator.prepared.models):
        wanted.append((f"model {i}", _model_file(path, i), model))
    for i, opt in enumerate(accelerator.prepared.optimizers):
        wanted.append((f"optimizer {i}", path / f"optimizer{_suffix(i)}.bin", opt))
    for i, sched in enumerate(accelerator.prepared.schedulers):
        wanted.append((f"scheduler {i}", path / f"scheduler{_suffix(i)}.bin", sched))
    for i, obj in enumerate(accelerator.prepared.custom_objects):
        wanted.append((f"custom object {i}", path / f"custom_checkpoint_{i}.pkl", obj))
    problems = [f"{what}: {file} is missing" for what, file, _ in wanted if not _exists(file)]
    if problems:
        raise CheckpointMismatchError(
            str(path), problems, "prepare the same objects as the run that saved it"
        )
    strategy = accelerator.strategy
    for what, file, obj in wanted:
        assert file is not None
        if file.suffix == ".safetensors":
            state = load_tensors(file, what=what)
        else:
            state = read_file(file, what=what, allow_unsafe_pickle=allow_unsafe_pickle)
        if what.startswith("model"):
            strategy.load_state_dict(cast(nn.Module, obj), state, strict=True)
        elif what.startswith("optimizer"):
            strategy.load_state_dict(cast(torch.optim.Optimizer, obj), state)
        else:
            obj.load_state_dict(state)
    unread = sorted(
        f.name for f in path.iterdir() if f.name.startswith(("dl_state_dict", "sampler"))
    )
    if unread and accelerator.prepared.dataloaders:
        warnings.warn(
            f"load_state: {', '.join(unread)} in {path} (Hugging Face Accelerate's loader "
            "state) is not read: the prepared dataloaders start their next epoch from its "
            "beginning; skip what was trained on with skip_first_batches",
            UserWarning,
            stacklevel=4,
        )
    scaler = path / "scaler.pt"
    if scaler.exists() and accelerator.precision.scaler is not None:
        accelerator.precision.load_state_dict(
            read_file(scaler, what="grad scaler", allow_unsafe_pickle=allow_unsafe_pickle)
        )
    rank = accelerator.state.process_index
    rng_file = path / f"random_states_{rank}.pkl"
    if not rng_file.exists():  # Accelerate goes on without them too (it logs it)
        _log.warning("load_state: %s is missing; the random streams are left as they are", rng_file)
        return
    states = read_file(rng_file, what="RNG state", allow_unsafe_pickle=allow_unsafe_pickle)
    step = states.get("step") if isinstance(states, Mapping) else None
    gradient_state = getattr(accelerator, "gradient_state", None)
    if isinstance(step, int) and gradient_state is not None:
        # Accelerate's micro-batch counter: where the open accumulation window stands.
        gradient_state.load_state_dict({"micro_batches": step % max(gradient_state.num_steps, 1)})
    _restore_rng(states)


def _exists(file: Path | None) -> bool:
    return file is not None and file.exists()


def _restore_rng(states: Mapping[str, Any]) -> None:
    """Hugging Face Accelerate's RNG states (``random``'s, numpy's, torch's tuples and
    tensors), put back."""
    if "random_state" in states:
        random.setstate(states["random_state"])
    if "numpy_random_seed" in states:
        np.random.set_state(states["numpy_random_seed"])
    if "torch_manual_seed" in states:
        torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])
