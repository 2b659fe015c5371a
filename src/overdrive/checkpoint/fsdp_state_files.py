"""Hugging Face Accelerate's FSDP resume helpers (transformers' Trainer calls them to checkpoint an
FSDP run), in overdrive's pickle-free formats and under its folder names.

``save_fsdp_model`` (``fsdp_files.py``) writes ``pytorch_model_fsdp_<i>`` (a folder of
per-process shards, under ``SHARDED_STATE_DICT``) or ``pytorch_model_fsdp_<i>.safetensors``
(full weights); ``save_fsdp_optimizer`` writes ``optimizer_<i>`` (a folder of shards) or
``optimizer_<i>.json`` + ``.safetensors`` (the full state, by the main process). Loading
reads only this process's part of each saved tensor, so a checkpoint written by N processes
loads under M, or under any other state-dict type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.load import keyed_for_strategy
from overdrive.checkpoint.merge import SHARDED_STEM
from overdrive.checkpoint.parts import Part, raw_optimizer
from overdrive.checkpoint.serialization import save_tree
from overdrive.checkpoint.shards import save_shards
from overdrive.checkpoint.unread import load_unread, read_like, unread_safetensors


def _sharded(accelerator: Any) -> bool:
    return bool(accelerator.strategy.sharded_checkpoints)


def load_fsdp_model(
    fsdp_plugin: Any,
    accelerator: Any,
    model: Any,
    input_dir: str | Path,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> Any:
    """Restore ``model`` from what ``save_fsdp_model`` wrote into ``input_dir`` (or that folder
    itself); call it on every process. Either form loads under either state-dict type and any
    process count. ``use_dcp`` changes nothing (one format, see ``save_fsdp_model``)."""
    what = f"load_fsdp_model: model {model_index}"
    folder = _named_folder(Path(input_dir), f"pytorch_model_fsdp_{model_index}")
    if folder.is_dir():
        tree: Any = load_unread(folder, SHARDED_STEM, what=what, sharded=True)
    else:
        tree = unread_safetensors(folder.with_suffix(".safetensors"), what=what)
    strategy = accelerator.strategy
    slices = strategy.loads_in_slices
    template = strategy.state_dict(model, sharded=True) if slices else None
    names = list(template if template is not None else strategy.unwrap(model).state_dict())
    _check_names(tree, names, what)
    try:
        if slices:
            result = strategy.load_state_dict(model, read_like(dict(tree), template), sharded=True)
        else:
            result = strategy.load_state_dict(model, read_like(dict(tree), None), strict=True)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{what} does not fit the saved weights in {input_dir}: {exc}\n"
            "  fix: build the model exactly as in the run that saved them"
        ) from exc
    accelerator.wait_for_everyone()
    return result


def _named_folder(given: Path, name: str) -> Path:
    """``given/name``, or ``given`` itself when it is that folder already."""
    return given if given.name == name and given.is_dir() else given / name


def _check_names(tree: Any, expected: list[str], what: str) -> None:
    """Refuse, naming the first few, when the saved names differ from the model's."""
    saved = set(tree)
    missing, extra = [k for k in expected if k not in saved], sorted(saved - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"{what}: the saved weights do not match the model's parameter names (missing: "
            f"{missing[:3]}, unexpected: {extra[:3]})\n"
            "  fix: build the model exactly as in the run that saved them"
        )


def save_fsdp_optimizer(
    fsdp_plugin: Any,
    accelerator: Any,
    optimizer: Any,
    model: Any,
    output_dir: str | Path,
    optimizer_index: int = 0,
    use_dcp: bool = True,
) -> Path:
    """Write ``optimizer``'s state under ``output_dir``; call it on every process. Returns the
    folder (sharded) or the JSON file (full) written. ``use_dcp`` changes nothing (one
    pickle-free format, see ``save_fsdp_model``)."""
    strategy, output = accelerator.strategy, Path(output_dir)
    what = f"save_fsdp_optimizer: optimizer {optimizer_index}"
    if _sharded(accelerator):
        folder = output / f"optimizer_{optimizer_index}"
        folder.mkdir(parents=True, exist_ok=True)
        tree = strategy.state_dict(raw_optimizer(optimizer), sharded=True)
        save_shards(tree, folder, SHARDED_STEM, rank=accelerator.process_index, what=what)
        accelerator.wait_for_everyone()
        return folder

    state = strategy.state_dict(raw_optimizer(optimizer))  # collective under FSDP
    stem = f"optimizer_{optimizer_index}"
    if accelerator.is_main_process:
        output.mkdir(parents=True, exist_ok=True)
        save_tree(state, output, stem, what=what)
    accelerator.wait_for_everyone()
    return output / f"{stem}.json"


def load_fsdp_optimizer(
    fsdp_plugin: Any,
    accelerator: Any,
    optimizer: Any,
    model: Any,
    input_dir: str | Path,
    optimizer_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> None:
    """Restore ``optimizer`` from what ``save_fsdp_optimizer`` wrote into ``input_dir`` (or that
    folder itself); call it on every process, after the model is prepared. Moments and step
    come back per parameter, resharded to this run's layout. ``use_dcp`` changes nothing."""
    raw = raw_optimizer(optimizer)
    what = f"load_fsdp_optimizer: optimizer {optimizer_index}"
    folder = _named_folder(Path(input_dir), f"optimizer_{optimizer_index}")
    if folder.is_dir():
        tree = load_unread(folder, SHARDED_STEM, what=what, sharded=True)
    else:
        tree = load_unread(Path(input_dir), folder.name, what=what, sharded=False)
    index = _optimizer_index(accelerator, optimizer)
    tree = keyed_for_strategy(accelerator, Part("optimizer", index, raw), tree, [])
    strategy = accelerator.strategy
    try:
        if strategy.loads_in_slices:
            state = read_like(tree, strategy.state_dict(raw, sharded=True))
            strategy.load_state_dict(raw, state, sharded=True)
        else:
            strategy.load_state_dict(raw, read_like(tree, None))
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{what} does not fit the saved state in {input_dir}: {exc}\n"
            "  fix: build the optimizer (its parameter groups) exactly as in the run that saved it"
        ) from exc
    accelerator.wait_for_everyone()


def _optimizer_index(accelerator: Any, optimizer: Any) -> int:
    """The position of ``optimizer`` among the prepared ones (key conversion needs it)."""
    for i, prepared in enumerate(accelerator._optimizers):
        if prepared is optimizer or getattr(prepared, "optimizer", None) is optimizer:
            return i
    raise CheckpointError(
        "load_fsdp_optimizer: the optimizer was not prepared by this Accelerator\n"
        "  fix: pass the optimizer accelerator.prepare() returned"
    )
