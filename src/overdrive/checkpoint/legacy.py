"""Checkpoints written by Hugging Face Accelerate (pickle files): refused unless trusted by name.

Its layout: ``pytorch_model[_i].bin`` or ``model[_i].safetensors``, ``optimizer[_i].bin``,
``scheduler[_i].bin``, ``scaler.pt``, ``random_states_<rank>.pkl``,
``custom_checkpoint_<i>.pkl``. With ``allow_unsafe_pickle=True`` these parts are restored;
dataloader positions in that layout cannot be, so dataloaders must be prepared afterwards.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from overdrive.checkpoint.errors import CheckpointMismatchError, UnsafeCheckpointError
from overdrive.checkpoint.layout import MANIFEST
from overdrive.checkpoint.parts import Stateful
from overdrive.checkpoint.serialization import PICKLE_SUFFIXES, load_pickle, load_tensors

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


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


def refuse_or_load_legacy(
    accelerator: CheckpointHost, path: Path, allow_unsafe_pickle: bool
) -> None:
    if not allow_unsafe_pickle:
        listed = ", ".join(_pickles(path)[:6])
        raise UnsafeCheckpointError(
            f"load_state: {path} is not an overdrive checkpoint: it holds pickle files "
            f"({listed}), and unpickling runs whatever code they contain, so overdrive "
            "does not load them by default\n  fix: if you wrote them yourself (for example "
            "with accelerate) and trust them, pass allow_unsafe_pickle=True to load_state"
        )
    _load(accelerator, path)


def _load(accelerator: CheckpointHost, path: Path) -> None:
    wanted: list[tuple[str, Path | None, Stateful]] = []
    for i, model in enumerate(accelerator.prepared.models):
        wanted.append((f"model {i}", _model_file(path, i), model))
    for i, opt in enumerate(accelerator.prepared.optimizers):
        wanted.append((f"optimizer {i}", path / f"optimizer{_suffix(i)}.bin", opt))
    for i, sched in enumerate(accelerator.prepared.schedulers):
        wanted.append((f"scheduler {i}", path / f"scheduler{_suffix(i)}.bin", sched))
    for i, obj in enumerate(accelerator.prepared.custom_objects):
        wanted.append((f"custom object {i}", path / f"custom_checkpoint_{i}.pkl", obj))
    rank = accelerator.state.process_index
    rng_file = path / f"random_states_{rank}.pkl"
    problems = [f"{what}: {file} is missing" for what, file, _ in wanted if not _exists(file)]
    if not rng_file.exists():
        problems.append(f"RNG state of process {rank}: {rng_file} is missing")
    if accelerator.prepared.dataloaders:
        problems.append(
            f"{len(accelerator.prepared.dataloaders)} prepared dataloader(s): the position of a "
            "dataloader cannot be restored from this layout"
        )
    if problems:
        raise CheckpointMismatchError(
            str(path),
            problems,
            "prepare the same objects as the run that saved it; prepare dataloaders after "
            "load_state (use skip_first_batches to resume mid-epoch), then save_state() once "
            "to convert the checkpoint",
        )
    strategy = accelerator.strategy
    for what, file, obj in wanted:
        assert file is not None
        if file.suffix == ".safetensors":
            state = load_tensors(file, what=what)
        else:
            state = load_pickle(file, what=what, allow_unsafe_pickle=True)
        if what.startswith("model"):
            strategy.load_state_dict(cast(nn.Module, obj), state, strict=True)
        elif what.startswith("optimizer"):
            strategy.load_state_dict(cast(torch.optim.Optimizer, obj), state)
        else:
            obj.load_state_dict(state)
    scaler = path / "scaler.pt"
    if scaler.exists():
        accelerator.precision.load_state_dict(
            load_pickle(scaler, what="grad scaler", allow_unsafe_pickle=True)
        )
    _restore_rng(load_pickle(rng_file, what="RNG state", allow_unsafe_pickle=True))


def _exists(file: Path | None) -> bool:
    return file is not None and file.exists()


def _restore_rng(states: Mapping[str, Any]) -> None:
    """Hugging Face Accelerate's pickled RNG states (``random``'s, numpy's, torch's tuples and
    tensors, untyped as unpickled), put back."""
    if "random_state" in states:
        random.setstate(states["random_state"])
    if "numpy_random_seed" in states:
        np.random.set_state(states["numpy_random_seed"])
    if "torch_manual_seed" in states:
        torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])
