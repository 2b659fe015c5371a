"""merge_weights: a checkpoint's model parts as full weights in the Hugging Face file layout.

Sharded parts (written by several processes) are assembled from their boxes; plain parts are
read as they are. A folder that ``save_fsdp_model`` wrote (``pytorch_model_fsdp_<i>``) is
one sharded model. Runs in one process without any process group.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import torch

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.layout import MANIFEST, newest_complete
from overdrive.checkpoint.model_files import parse_size, write_model_files
from overdrive.checkpoint.parts import FORMAT
from overdrive.checkpoint.records import Manifest, PartRecord
from overdrive.checkpoint.serialization import load_tree, read_json
from overdrive.checkpoint.shard_reader import merge_full, rank_file

SHARDED_STEM = "model"  # the shard files' stem in a save_fsdp_model folder
_STEM = re.compile(r"[A-Za-z0-9_.-]+")
_FIX_DIR = "pass a directory that save_state() wrote, e.g. runs/exp1/checkpoints/checkpoint_3"


def _manifest(checkpoint: Path) -> Manifest:
    if not checkpoint.is_dir():
        what = "is not a directory" if checkpoint.exists() else "does not exist"
        raise CheckpointError(f"merge-weights: {checkpoint} {what}\n  fix: {_FIX_DIR}")
    marker = checkpoint / MANIFEST
    if not marker.is_file():
        newest = newest_complete(checkpoint) or newest_complete(checkpoint / "checkpoints")
        fix = f"did you mean {newest}?" if newest else _FIX_DIR
        raise CheckpointError(
            f"merge-weights: {checkpoint} is not a complete overdrive checkpoint (it has no "
            f"{MANIFEST})\n  fix: {fix}"
        )
    manifest = read_json(marker)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"merge-weights: {marker} is not an overdrive checkpoint manifest\n  fix: {_FIX_DIR}"
        )
    return cast(Manifest, manifest)  # its parts are checked by _model_parts


def _model_parts(manifest: Manifest, checkpoint: Path) -> list[PartRecord]:
    parts = manifest.get("parts")
    models = (
        [p for p in parts if isinstance(p, dict) and p.get("kind") == "model"]
        if isinstance(parts, list)
        else []
    )
    if not models:
        raise CheckpointError(
            f"merge-weights: the checkpoint {checkpoint} holds no model (its manifest lists no "
            "model part)\n  fix: save it after accelerator.prepare(model, ...)"
        )
    for p in models:
        if not isinstance(p.get("index"), int) or not _STEM.fullmatch(str(p.get("file"))):
            raise CheckpointError(f"merge-weights: {checkpoint / MANIFEST} lists a bad part {p}")
    return sorted(models, key=lambda p: p["index"])


def _state(checkpoint: Path, part: PartRecord) -> dict[str, torch.Tensor]:
    what = f"model {part['index']} ({part.get('class', '?')})"
    if part.get("sharded"):
        return merge_full(checkpoint, part["file"], what=what)
    state = load_tree(checkpoint, part["file"], what=what)
    if not isinstance(state, dict):
        raise CheckpointError(f"{what}: {checkpoint / part['file']}.json is not a state dict")
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def is_fsdp_model_folder(folder: Path) -> bool:
    """Whether ``folder`` holds one model's shards as ``save_fsdp_model`` writes them."""
    return (folder / rank_file(SHARDED_STEM, 0, "json")).is_file() and not (
        folder / MANIFEST
    ).exists()


def merge_into(folder: Path, output: Path, *, safe: bool = True) -> list[str]:
    """The first model of ``folder`` (a ``save_fsdp_model`` folder or a checkpoint) as full
    weights in ``output``; ``safe=False`` writes ``pytorch_model.bin`` instead."""
    done = merge_weights(folder, output, safe=safe)
    return done[0][2]


def merge_weights(
    checkpoint: Path, output: Path, max_shard_size: int | str = "10GB", *, safe: bool = True
) -> list[tuple[str, Path, list[str]]]:
    """Write each model part: ``model_0`` into ``output``, ``model_<i>`` into
    ``output/model_<i>``. Returns (part, directory, file names) for each."""
    try:
        parse_size(max_shard_size)
    except CheckpointError:
        raise CheckpointError(
            f"merge-weights: --max_shard_size {max_shard_size!r} is not a size\n"
            "  fix: pass bytes, or text like 10GB, 500MB or 2GiB"
        ) from None
    checkpoint, output = Path(checkpoint), Path(output)
    models: list[PartRecord]
    if is_fsdp_model_folder(checkpoint):
        models = [
            {"kind": "model", "index": 0, "file": SHARDED_STEM, "sharded": True, "class": "model"}
        ]
    else:
        models = _model_parts(_manifest(checkpoint), checkpoint)
    if output.exists() and not output.is_dir():
        raise CheckpointError(
            f"merge-weights: {output} exists and is not a directory\n  fix: choose another path"
        )
    if output.resolve() == checkpoint.resolve():
        raise CheckpointError(
            f"merge-weights: the output directory is the checkpoint itself ({output})\n"
            "  fix: write the weights to another directory"
        )
    done: list[tuple[str, Path, list[str]]] = []
    for part in models:
        state = _state(checkpoint, part)
        target = output if part["index"] == 0 else output / part["file"]
        done.append(
            (str(part["file"]), target, write_model_files(state, target, max_shard_size, safe))
        )
    return done


MODEL_CONFIG_FILES = ("config.json", "generation_config.json")


def config_places(checkpoint: Path) -> list[Path]:
    """Where a model's ``config.json`` may sit: in the checkpoint, beside it (a Trainer
    checkpoint holds the ``pytorch_model_fsdp_0`` folder and the config), one level above."""
    checkpoint = Path(checkpoint).resolve()
    return [checkpoint, checkpoint.parent, checkpoint.parent.parent]


def copy_model_config(checkpoint: Path, output: Path) -> Path | None:
    """Copy the model's config files found nearest ``checkpoint`` into ``output`` (already
    written) so ``from_pretrained(output)`` loads it; returns the folder they came from."""
    import shutil

    for place in config_places(checkpoint):
        if (place / MODEL_CONFIG_FILES[0]).is_file():
            for name in MODEL_CONFIG_FILES:
                if (place / name).is_file() and not (Path(output) / name).exists():
                    shutil.copyfile(place / name, Path(output) / name)
            return place
    return None
