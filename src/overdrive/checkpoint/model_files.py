"""save_model: the unwrapped model's weights in the Hugging Face file layout.

One file ``model.safetensors`` when it fits in ``max_shard_size``; otherwise
``model-00001-of-0000N.safetensors`` shards plus ``model.safetensors.index.json``
(``{"metadata": {"total_size": ...}, "weight_map": {name: file}}``). Plain
``safetensors.torch.load_file`` reads every file; no overdrive needed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from overdrive.bigmodel.align import has_offloaded_params
from overdrive.bigmodel.offloaded_state import get_state_dict_offloaded_model
from overdrive.bigmodel.tensor_files import replace_atomically, untied_tensors
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.records import ModelIndex
from overdrive.checkpoint.serialization import writing
from overdrive.checkpoint.tensor_file import write_safetensors

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_STALE = re.compile(
    r"^(model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?|"
    r"pytorch_model(-\d{5}-of-\d{5})?\.bin(\.index\.json)?)$"
)


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or text such as ``"10GB"`` (10**9) or ``"500MiB"`` (2**20)."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*", str(size).upper())
    if not match or float(match.group(1)) <= 0:
        raise CheckpointError(
            f"save_model: max_shard_size={size!r} is not a size\n"
            "  fix: pass bytes as an int, or text like '10GB', '500MB' or '2GiB'"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def shard(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive groups of at most ``max_bytes`` (a bigger tensor gets a shard of its own)."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    return shards


def _replace_into(path: Path, write: Callable[[Path], object]) -> None:
    with writing(path, "save_model"):
        replace_atomically(path, write)


def write_model_files(
    state: Mapping[str, object], directory: Path, max_shard_size: int | str, safe: bool
) -> list[str]:
    """Write the files; returns their names (index last when sharded)."""
    max_bytes = parse_size(max_shard_size)
    tensors, tied = untied_tensors(state)
    groups = shard(tensors, max_bytes)
    directory.mkdir(parents=True, exist_ok=True)
    stem, ext = ("model", "safetensors") if safe else ("pytorch_model", "bin")
    n = len(groups)
    names = (
        [f"{stem}.{ext}"]
        if n == 1
        else [f"{stem}-{i:05d}-of-{n:05d}.{ext}" for i in range(1, n + 1)]
    )
    metadata = {"format": "pt"}
    if tied:
        metadata["tied_weights"] = json.dumps(tied)
    for name, group in zip(names, groups):
        if safe:
            _replace_into(directory / name, partial(write_safetensors, group, metadata=metadata))
        else:
            _replace_into(directory / name, partial(torch.save, group))
    written = list(names)
    if n > 1:
        index: ModelIndex = {
            "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
            "weight_map": {k: name for name, group in zip(names, groups) for k in group},
        }
        if tied:
            index["metadata"]["tied_weights"] = tied
        index_name = f"{stem}.{ext}.index.json"
        _replace_into(directory / index_name, lambda p: p.write_text(json.dumps(index, indent=2)))
        written.append(index_name)
    for old in directory.iterdir():
        if _STALE.match(old.name) and old.name not in written:
            old.unlink()
    return written


def save_model(
    accelerator: CheckpointHost,
    model: torch.nn.Module,
    save_directory: str | Path,
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
) -> None:
    """Write ``model``'s weights (unwrapped) from the main process; every process returns
    once the files are there. Tied weights are saved once, as ``save_pretrained`` does."""
    parse_size(max_shard_size)  # a bad size fails on every rank, before any collective
    directory = Path(save_directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(
            f"save_model: {directory} exists and is not a directory\n  fix: choose another path"
        )
    strategy = getattr(accelerator, "strategy", None)
    unwrapped = accelerator.unwrap_model(model)
    if any(has_offloaded_params(m) for m in unwrapped.modules()):
        # Offloaded weights sit on the meta device between forwards: read each module's back.
        state = get_state_dict_offloaded_model(unwrapped)
    elif strategy is not None:
        state = strategy.state_dict(model)
    else:
        state = unwrapped.state_dict()
    if accelerator.state.is_main_process:
        write_model_files(state, directory, max_shard_size, safe_serialization)
    accelerator.state.wait_for_everyone()
