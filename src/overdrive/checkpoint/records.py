"""The JSON a checkpoint's files hold, typed, and the few other shapes checkpoint code shares.

These describe what overdrive writes. What is read back is checked where it is read
(``load.read_manifest``, ``shard_reader.read_tables``, ``Chunk.parse``...) before it is
taken to have these shapes: a file may be damaged, or written by another version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypeAlias, TypedDict

import torch

JSON: TypeAlias = "None | bool | int | float | str | Sequence[JSON] | Mapping[str, JSON]"
"""A value ``json.dumps`` writes as it is (what ``serialization.flatten`` makes of a tree)."""

StateDict: TypeAlias = dict[str, Any]
"""A ``state_dict()`` as torch types one (``torch.optim.optimizer.StateDict``): names to
tensors, numbers and nested containers, whatever each object keeps. What ``Strategy``'s
``state_dict``/``load_state_dict`` give and take."""


class FileRecord(TypedDict):
    """One file's size and checksum (``integrity.checksum``'s record)."""

    size: int
    crc32: str


PartRecord = TypedDict(
    "PartRecord",
    {"kind": str, "index": int, "file": str, "class": str, "sharded": NotRequired[bool]},
)
"""One saved object in the manifest (``parts.describe``); ``sharded`` only when it is."""


class PrecisionRecord(TypedDict):
    name: str
    has_state: bool


class Manifest(TypedDict):
    """The completion marker, ``overdrive_checkpoint.json``."""

    format: str
    version: int
    overdrive_version: str
    created: str
    name: str
    world_size: int
    parts: list[PartRecord]
    dataloaders: int
    precision: PrecisionRecord
    checksum: NotRequired[str]  # version 2 on, as ``files``
    files: NotRequired[dict[str, FileRecord]]
    rank_states: NotRequired[str]  # ``save_alone.ADDED_BY_EACH``
    save_id: NotRequired[str]  # such a save's name in the process group's store


class StateFile(TypedDict):
    """``{stem}.json`` of a tree written whole (``serialization.save_tree``)."""

    tensors: bool
    state: JSON


class ChunkRecord(TypedDict):
    """One saved box in a shard table: tensor ``key`` of the rank's file."""

    key: str
    offsets: list[int]
    shape: list[int]
    global_shape: list[int]
    dtype: str


class ShardTable(TypedDict):
    """``{stem}.rank{r}.json`` (``shards.save_shards``): the rank's chunks, rank 0's tree."""

    format: str
    version: int
    rank: int
    world_size: int
    tensors: bool
    chunks: list[ChunkRecord]
    tree: JSON


class RankState(TypedDict):
    """What differs between processes (``snapshot.rank_state``): ``rank_{i}/state``."""

    rng: StateDict  # ``random_state.capture_rng_state``
    dataloaders: list[StateDict]  # each prepared loader's position
    accumulation: NotRequired[StateDict]  # the open accumulation window
    grads: NotRequired[list[dict[str, torch.Tensor]]]  # its summed gradients, per model


class IndexMetadata(TypedDict):
    total_size: int
    tied_weights: NotRequired[dict[str, str]]


class ModelIndex(TypedDict):
    """``model.safetensors.index.json`` (``model_files.write_model_files``)."""

    metadata: IndexMetadata
    weight_map: dict[str, str]
