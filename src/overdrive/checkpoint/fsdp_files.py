"""Hugging Face Accelerate's FSDP file helpers, in overdrive's pickle-free formats.

``save_fsdp_model`` writes what Hugging Face Accelerate's does, under its names: with a sharded
state dict a folder ``pytorch_model_fsdp_<i>`` where every process writes its own boxes
(``checkpoint/shards.py``'s safetensors + JSON tables, not ``torch.distributed.checkpoint``'s
pickled metadata); with a full state dict one ``pytorch_model_fsdp_<i>.safetensors`` from the
main process. ``merge_fsdp_weights`` turns such a folder (or a ``save_state`` checkpoint) into
full weights, as ``overdrive merge-weights`` does.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from overdrive.checkpoint.merge import SHARDED_STEM, merge_into
from overdrive.checkpoint.shards import save_shards
from overdrive.checkpoint.tensor_file import write_safetensors
from overdrive.errors import OverdriveError


def save_fsdp_model(
    fsdp_plugin: Any,
    accelerator: Any,
    model: Any,
    output_dir: str | Path,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> Path:
    """Write ``model``'s weights under ``output_dir``; returns the folder or file written.

    Call it on every process (the sharded form is written by all of them). Whether it is
    sharded follows the prepared model's FSDP ``state_dict_type``. ``adapter_only`` is
    ignored for a model without PEFT adapters (transformers' Trainer always passes it).
    ``use_dcp`` is accepted and changes nothing: Hugging Face Accelerate chooses with it
    between ``torch.distributed.checkpoint`` and per-rank ``torch.save`` files, and
    overdrive's sharded form is already per-process safetensors written without collectives.
    """
    if adapter_only and getattr(accelerator.unwrap_model(model), "peft_config", None):
        raise OverdriveError(
            "save_fsdp_model(adapter_only=True) on a model with PEFT adapters: overdrive does not "
            "save adapters alone\n  fix: save the adapter with PEFT's own save_pretrained()"
        )
    strategy = accelerator.strategy
    output = Path(output_dir)
    if getattr(strategy, "sharded_checkpoints", False):
        folder = output / f"pytorch_model_fsdp_{model_index}"
        folder.mkdir(parents=True, exist_ok=True)
        tree = strategy.state_dict(model, sharded=True)
        save_shards(
            tree, folder, SHARDED_STEM, rank=accelerator.process_index, what=f"model {model_index}"
        )
        if accelerator.is_main_process:
            _save_model_config(accelerator.unwrap_model(model), output)
        accelerator.wait_for_everyone()
        _say_how_to_merge(accelerator, folder)
        return folder

    state = accelerator.get_state_dict(model)
    path = output / f"pytorch_model_fsdp_{model_index}.safetensors"
    if accelerator.is_main_process:
        output.mkdir(parents=True, exist_ok=True)
        write_safetensors({k: v.contiguous() for k, v in state.items()}, path, {"format": "pt"})
    accelerator.wait_for_everyone()
    return path


def _save_model_config(model: Any, output: Path) -> None:
    """A transformers model's ``config.json`` (and ``generation_config.json``) beside the
    shards, where Trainer's full-state-dict checkpoints have them: ``overdrive merge-weights``
    copies them next to the merged weights, so ``from_pretrained`` loads the result."""
    save_config = getattr(getattr(model, "config", None), "save_pretrained", None)
    if not callable(save_config):
        return
    save_config(output)
    generation = getattr(model, "generation_config", None)
    can_generate = getattr(model, "can_generate", None)
    if generation is not None and callable(can_generate) and can_generate():
        generation.save_pretrained(output)


_MERGE_NOTED: set[str] = set()
STATE_DICT_KEY = "fsdp_config.fsdp_state_dict_type"


def _say_how_to_merge(accelerator: Any, folder: Path) -> None:
    """Once per output directory, at the first checkpoint: transformers' Trainer.save_model
    writes no weights under a sharded state dict, and the one command that gets them."""
    parent = str(folder.parent.parent)
    if accelerator.is_main_process and parent not in _MERGE_NOTED:
        _MERGE_NOTED.add(parent)
        import sys

        settings = getattr(accelerator, "settings", None)
        source = f" ({settings.source(STATE_DICT_KEY)})" if settings is not None else ""
        sys.stderr.write(
            f"overdrive: warning: fsdp_state_dict_type is SHARDED_STATE_DICT{source}, so "
            f"{folder} holds each process's shards of the weights and transformers' "
            "Trainer.save_model() writes no weights at all. Full weights that from_pretrained "
            f"loads: `overdrive merge-weights {folder} {folder.parent}-merged` (on the last "
            "checkpoint), or set fsdp_state_dict_type: FULL_STATE_DICT\n"
        )


def merge_fsdp_weights(
    checkpoint_dir: str | Path,
    output_path: str | Path,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> list[str]:
    """Write the full weights of ``checkpoint_dir`` into ``output_path`` (``model.safetensors``,
    or ``pytorch_model.bin`` with ``safe_serialization=False``); returns the file names.

    In a process group only the main process writes and every process waits for it, as
    in Hugging Face Accelerate, so a script may call it on every rank.
    """
    import torch.distributed as dist

    grouped = dist.is_available() and dist.is_initialized()
    written: list[str] = []
    if not grouped or dist.get_rank() == 0:
        written = merge_into(Path(checkpoint_dir), Path(output_path), safe=safe_serialization)
        if remove_checkpoint_dir:
            shutil.rmtree(checkpoint_dir)
    if grouped:
        dist.barrier()
    return written
