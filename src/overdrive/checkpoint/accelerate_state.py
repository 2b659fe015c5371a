"""The work behind Hugging Face Accelerate's ``accelerate.checkpointing`` (the face
``overdrive/checkpointing.py``): save and load a run's pieces (model states, optimizers,
schedulers, dataloaders, the loss scaler, the RNGs) under the file names it uses, through
overdrive's checkpoint serialization.

overdrive never writes pickle: model weights go to ``model[_i].safetensors`` and every other
state to ``<name>.json`` (+ ``<name>.safetensors`` for its tensors), e.g. ``optimizer.json``,
``scheduler_1.json``, ``random_states_0.json``, ``custom_checkpoint_0.json``. Loading reads
those, and also the pickle files Hugging Face Accelerate writes (``optimizer.bin``,
``random_states_0.pkl``...) through torch's ``weights_only`` loader, which rebuilds tensors,
numbers and containers and runs no code from the file, as Hugging Face Accelerate itself
loads them. A custom object's pickle, which needs the full unpickler, is read only with
``allow_unsafe_pickle=True``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from overdrive.bigmodel.write_once import without_shared_storage
from overdrive.checkpoint.errors import CheckpointError, UnsafeCheckpointError
from overdrive.checkpoint.legacy import _restore_rng, read_file
from overdrive.checkpoint.serialization import (
    load_tree,
    load_weights_only,
    save_tree,
)
from overdrive.environment.rank_logging import get_logger
from overdrive.processes.process_state import current_partial_state
from overdrive.processes.random_state import capture_rng_state, restore_rng_state
from overdrive.training.optimizer import move_to_device

logger = get_logger(__name__)

__all__ = [
    "load_accelerator_state",
    "load_custom_state",
    "save_accelerator_state",
    "save_custom_state",
]


def _name(stem: str, index: int) -> str:
    return stem if index == 0 else f"{stem}_{index}"


def _writer(save_on_each_node: bool) -> bool:
    """Whether this process writes the shared files (each machine's first with
    ``save_on_each_node``, else the job's first)."""
    state = current_partial_state()
    return bool(state.is_local_main_process if save_on_each_node else state.is_main_process)


def _save(obj: Any, directory: Path, stem: str) -> None:
    save_tree(obj, directory, stem, what=stem)


def save_accelerator_state(
    output_dir: str,
    model_states: list[dict[str, Any]],
    optimizers: list[Any],
    schedulers: list[Any],
    dataloaders: list[Any],
    process_index: int,
    step: int,
    scaler: Any = None,
    save_on_each_node: bool = False,
    safe_serialization: bool = True,
) -> Path:
    """Write the pieces of a run to ``output_dir`` and return it.

    The main process (each machine's, with ``save_on_each_node``) writes the model states,
    optimizers, schedulers, the dataloaders' positions (loaders that have a ``state_dict``)
    and the scaler; every process writes its own RNG states and ``step`` as
    ``random_states_<process_index>``. ``safe_serialization=False`` still writes
    safetensors (overdrive writes no pickle), with a warning.
    """
    directory = Path(output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    if not safe_serialization:
        logger.warning("save_accelerator_state(safe_serialization=False): overdrive writes "
                       "model weights as safetensors all the same (it writes no pickle)")  # fmt: skip
    if _writer(save_on_each_node):
        from safetensors.torch import save_file

        for i, state in enumerate(model_states):
            tensors = {k: v.detach().cpu() for k, v in state.items() if isinstance(v, torch.Tensor)}
            target = directory / f"{_name('model', i)}.safetensors"
            save_file(without_shared_storage(tensors), str(target), metadata={"format": "pt"})
            logger.info(f"Model weights saved in {target}")
        for stem, objects in (("optimizer", optimizers), ("scheduler", schedulers)):
            for i, obj in enumerate(objects):
                _save(obj.state_dict(), directory, _name(stem, i))
                logger.info(f"{stem.capitalize()} state saved in {directory / _name(stem, i)}")
        for i, loader in enumerate(dataloaders):
            if callable(getattr(loader, "state_dict", None)):
                _save(loader.state_dict(), directory, _name("dl_state_dict", i))
        if scaler is not None:
            _save(scaler.state_dict(), directory, "scaler")
    _save({"step": step, "rng": capture_rng_state()}, directory, f"random_states_{process_index}")
    logger.info(f"Random states saved in {directory}")
    return directory


def _read(directory: Path, stem: str, *, required: bool = True) -> Any:
    """``stem``'s state: overdrive's ``stem.json``, else Accelerate's pickle file."""
    if (directory / f"{stem}.json").exists():
        return load_tree(directory, stem, what=stem)
    for suffix in (".bin", ".pkl", ".pt"):
        if (directory / f"{stem}{suffix}").exists():
            return load_weights_only(directory / f"{stem}{suffix}")
    if not required:
        return None
    raise CheckpointError(
        f"{directory} holds no {stem} ({stem}.json, or {stem}.bin from Hugging Face "
        "Accelerate)\n  fix: load a checkpoint saved with the same objects"
    )


def _load_model(
    model: Any, directory: Path, index: int, device: Any, kwargs: dict[str, Any]
) -> None:
    weights = directory / f"{_name('model', index)}.safetensors"
    if weights.exists():
        from safetensors.torch import load_model

        load_model(model, str(weights), device=str(device), **kwargs)
        return
    state = load_weights_only(directory / f"{_name('pytorch_model', index)}.bin", device)
    model.load_state_dict(state, **kwargs)


def load_accelerator_state(
    input_dir: str,
    models: list[Any],
    optimizers: list[Any],
    schedulers: list[Any],
    dataloaders: list[Any],
    process_index: int,
    scaler: Any = None,
    map_location: Any = None,
    load_kwargs: dict[str, Any] | None = None,
    **load_model_func_kwargs: Any,
) -> dict[str, Any]:
    """Restore what ``save_accelerator_state`` (or Hugging Face Accelerate's) wrote in
    ``input_dir``; returns the attributes to set back (``{"step": ...}`` when saved).

    ``map_location``: None or ``"cpu"`` loads onto the CPU, ``"on_device"`` onto this
    process's device. ``load_model_func_kwargs`` go to the models' ``load_state_dict``
    (``strict=...``). ``load_kwargs`` may only confirm ``weights_only=True``: a full
    unpickle runs code from the file and is refused.
    """
    if map_location not in (None, "cpu", "on_device"):
        raise TypeError(
            "Unsupported optimizer map location passed, please choose one of `None`, "
            "`'cpu'`, or `'on_device'`"
        )
    device = current_partial_state().device if map_location == "on_device" else "cpu"
    extra = dict(load_kwargs or {})
    if extra.pop("weights_only", True) is not True or extra:
        raise UnsafeCheckpointError(
            f"load_accelerator_state(load_kwargs={load_kwargs!r}): overdrive reads a "
            "checkpoint's files as data only\n  fix: drop load_kwargs"
        )
    directory = Path(input_dir)
    for i, model in enumerate(models):
        _load_model(model, directory, i, device, load_model_func_kwargs)
    logger.info("All model weights loaded successfully")
    for i, opt in enumerate(optimizers):
        opt.load_state_dict(move_to_device(_read(directory, _name("optimizer", i)), device))
    for i, scheduler in enumerate(schedulers):
        scheduler.load_state_dict(_read(directory, _name("scheduler", i)))
    for i, loader in enumerate(dataloaders):
        state = _read(directory, _name("dl_state_dict", i), required=False)
        if state is not None and callable(getattr(loader, "load_state_dict", None)):
            loader.load_state_dict(state)
    if scaler is not None:
        scaler.load_state_dict(_read(directory, "scaler"))
    return _restore_random_states(directory, process_index)


def _restore_random_states(directory: Path, index: int) -> dict[str, Any]:
    """Put this process's RNG states back; ``{"step": ...}`` when the file holds one."""
    states = _read(directory, f"random_states_{index}", required=False)
    if not isinstance(states, dict):
        logger.info("Could not load random states")
        return {}
    if "rng" in states:
        restore_rng_state(states["rng"])
    else:  # Hugging Face Accelerate's pickle: python, numpy, torch (and CUDA) states
        _restore_rng(states)
    logger.info("All random states loaded successfully")
    return {"step": states["step"]} if "step" in states else {}


def save_custom_state(obj: Any, path: str, index: int = 0, save_on_each_node: bool = False) -> None:
    """Write ``obj.state_dict()`` as ``{path}/custom_checkpoint_{index}.json`` (+ its
    tensors), from the main process (each machine's, with ``save_on_each_node``)."""
    if _writer(save_on_each_node):
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        logger.info(f"Saving the state of {type(obj).__name__} to {directory}")
        _save(obj.state_dict(), directory, f"custom_checkpoint_{index}")


def load_custom_state(
    obj: Any, path: str, index: int = 0, *, allow_unsafe_pickle: bool = False
) -> None:
    """Give ``obj.load_state_dict`` what ``save_custom_state`` wrote. Hugging Face
    Accelerate's ``custom_checkpoint_<index>.pkl`` is read as its other files are
    (``weights_only``: tensors, numbers, numpy arrays); one that names other objects only with
    ``allow_unsafe_pickle=True``."""
    directory, stem = Path(path), f"custom_checkpoint_{index}"
    logger.info(f"Loading the state of {type(obj).__name__} from {directory / stem}")
    if (directory / f"{stem}.json").exists():
        obj.load_state_dict(load_tree(directory, stem, what=stem))
        return
    state = read_file(directory / f"{stem}.pkl", what=stem, allow_unsafe_pickle=allow_unsafe_pickle)
    obj.load_state_dict(state)
