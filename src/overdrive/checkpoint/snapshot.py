"""What one process writes for a checkpoint, taken at one moment and written later.

``take`` runs the collective part of a save (full state dicts are gathered, sharded ones
read) and, for an asynchronous save, copies every tensor to fresh host memory so training
may change the originals; ``write`` then writes the files and returns their record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from overdrive.checkpoint import integrity
from overdrive.checkpoint.parts import main_parts
from overdrive.checkpoint.records import FileRecord, RankState
from overdrive.checkpoint.serialization import save_tree, writing
from overdrive.checkpoint.shards import LocalShard, local_shard, save_shards
from overdrive.processes.random_state import capture_rng_state

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

    from overdrive.checkpoint.host import CheckpointHost


@dataclass
class Snapshot:
    """The trees one process writes: shared parts (the main process), its shards, its state."""

    rank: int
    main: list[tuple[str, str, object]] = field(default_factory=list)  # (stem, label, tree)
    shards: list[tuple[str, str, object]] = field(default_factory=list)
    rank_state: object = None


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a sharded (DTensor) gradient; a plain tensor as it is."""
    to_local = getattr(tensor, "to_local", None)
    if callable(to_local):
        local: torch.Tensor = to_local()
        return local
    return tensor


def rank_state(accelerator: CheckpointHost) -> RankState:
    """What differs between ranks: RNG streams, data positions, an open accumulation window."""

    state: RankState = {
        "rng": capture_rng_state(),
        "dataloaders": [dl.state_dict() for dl in accelerator.prepared.dataloaders],
    }
    gradient_state = getattr(accelerator, "gradient_state", None)
    if gradient_state is not None:
        state["accumulation"] = gradient_state.state_dict()
        if gradient_state.state_dict().get("micro_batches"):
            # Mid-window: the summed gradients are part of the training state.
            state["grads"] = [
                {
                    name: _local(p.grad)
                    for name, p in accelerator.unwrap_model(m).named_parameters()
                    if p.grad is not None
                }
                for m in accelerator.prepared.models
            ]
    return state


def _copy(tree: object) -> object:
    """``tree`` with every tensor copied to host memory of its own; a DTensor becomes the
    host copy of this process's box (``LocalShard``), which ``save_shards`` writes as is."""

    if isinstance(tree, LocalShard):  # a box given as such (pipeline stages): copied if written
        keep = tree.write and not tree.data.is_meta
        data = tree.data.detach().to("cpu", copy=True) if keep else tree.data.new_empty(0)
        return LocalShard(data, tree.global_shape, tree.offsets, tree.write)
    if isinstance(tree, torch.Tensor):
        if hasattr(tree, "device_mesh"):
            box = local_shard(cast("DTensor", tree), what="save_state", key="")
            data = box.data.detach().to("cpu", copy=True)
            return LocalShard(data, box.global_shape, box.offsets, box.write)
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {k: _copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_copy(v) for v in tree]
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return tuple(_copy(v) for v in tree)
    return tree


def take(accelerator: CheckpointHost, *, copy: bool) -> Snapshot:
    """The trees to write; collective (call on every process). ``copy`` detaches them from
    the live model and optimizer (asynchronous saves)."""
    strategy, rank = accelerator.strategy, accelerator.state.process_index
    snap = Snapshot(rank=rank)
    stage = _copy if copy else (lambda tree: tree)
    for part in main_parts(accelerator):
        tree: object
        if part.sharded:
            if part.kind == "model":
                tree = strategy.state_dict(accelerator.prepared.models[part.index], sharded=True)
            else:
                tree = strategy.state_dict(
                    accelerator.prepared.optimizers[part.index], sharded=True
                )
            snap.shards.append((part.stem, part.label, stage(tree)))
            continue
        if part.kind == "model":
            tree = strategy.state_dict(accelerator.prepared.models[part.index])
        elif part.kind == "optimizer":
            tree = strategy.state_dict(accelerator.prepared.optimizers[part.index])
        else:
            tree = part.obj.state_dict()
        if rank == 0:
            snap.main.append((part.stem, part.label, stage(tree)))
    if rank == 0:
        precision = stage(accelerator.precision.state_dict())
        snap.main.append(("precision", "precision state", precision))
    snap.rank_state = stage(rank_state(accelerator))
    return snap


def write(snap: Snapshot, temp: Path, fault_point: Callable[[str], None]) -> str:
    """Write this process's files into ``temp``; a JSON record of their sizes and checksums.
    ``fault_point`` is called between stages (a seam for tests that kill a save)."""

    written: list[str] = []
    sums: dict[Path, FileRecord] = {}  # tensor files' checksums, taken while writing
    for stem, label, tree in snap.shards:
        paths = save_shards(tree, temp, stem, rank=snap.rank, what=label, checksums=sums)
        written += [p.name for p in paths]
    for stem, label, tree in snap.main:
        written += save_tree(tree, temp, stem, what=label, checksums=sums)
        if stem != "precision":
            fault_point(f"wrote {stem}")
    fault_point("writing rank files")
    rank_dir = temp / f"rank_{snap.rank}"
    what = f"process {snap.rank} state"
    with writing(rank_dir, what):
        rank_dir.mkdir()
    names = save_tree(snap.rank_state, rank_dir, "state", what=what, checksums=sums)
    written += [f"rank_{snap.rank}/{name}" for name in names]
    fault_point("wrote rank files")
    return json.dumps(integrity.record(temp, written, known=sums))
