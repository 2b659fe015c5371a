"""What ``save_state`` would write for a simulated rank: the same collection of state as a
real save (``checkpoint.snapshot.take``) and the same file layout (``checkpoint.snapshot.write``),
with every tensor file measured instead of written (the fake tensors hold no bytes)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from overdrive.checkpoint import model_files, serialization, shards
from overdrive.checkpoint.records import FileRecord
from overdrive.checkpoint.save import manifest_of
from overdrive.checkpoint.snapshot import Snapshot, take, write
from overdrive.checkpoint.tensor_file import safetensors_size
from overdrive.simulate.patching import patched

_WRITERS = (serialization, shards, model_files)
"""The modules that write tensor files during a save."""


@contextlib.contextmanager
def _measured_tensor_files(sizes: dict[str, int]) -> Iterator[None]:
    """Tensor files become empty files; ``sizes`` gets the size each would have, by path."""

    def measure(
        tensors: Mapping[str, torch.Tensor],
        path: str | Path,
        metadata: Mapping[str, str] | None = None,
        **_: Any,
    ) -> FileRecord:
        size = safetensors_size(tensors, metadata)
        Path(path).touch()
        sizes[str(path)] = size
        return {"size": size, "crc32": "0"}

    with contextlib.ExitStack() as stack:
        for module in _WRITERS:
            stack.enter_context(patched(module, "write_safetensors", measure))
        yield


def _shaped_redistribute(
    self: Any, device_mesh: Any = None, placements: Any = None, **_: Any
) -> Any:
    """``DTensor.redistribute`` for a measurement: a DTensor of the same global shape in the
    asked placements, its local part an empty tensor of the right shape. The real one would
    run the gathers through the fake group, operator by operator, for values no file holds:
    only a tensor's shape and dtype decide the size of its file."""
    mesh = device_mesh if device_mesh is not None else self.device_mesh
    places = tuple(placements) if placements is not None else tuple(self.placements)
    shape, _offset = compute_local_shape_and_global_offset(self.shape, mesh, places)
    local = self._local_tensor.new_empty(shape)
    return DTensor.from_local(
        local, mesh, places, run_check=False, shape=self.shape, stride=self.stride()
    )


@contextlib.contextmanager
def _gathers_by_shape() -> Iterator[None]:
    """While a save is measured, a DTensor's redistribution (the full state dict's gathers,
    ``full_tensor``) makes a tensor of the right shape instead of running collectives, which
    the report does not count for the save."""
    with patched(DTensor, "redistribute", _shaped_redistribute):
        yield


def _written(snap: Snapshot, folder: Path, sizes: dict[str, int]) -> dict[str, int]:
    folder.mkdir()
    write(snap, folder, lambda stage: None)
    return {
        str(path.relative_to(folder)): sizes.get(str(path), path.stat().st_size)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def checkpoint_files(accelerator: Any) -> dict[str, dict[str, int]]:
    """The files this rank writes in a ``save_state`` of ``accelerator`` (names relative to
    the checkpoint folder) and their sizes in bytes: ``own`` (what every rank writes of its
    own) and ``main`` (what only the main process writes: the unsharded model and optimizer
    files, the scheduler's, ...). Collective, as a real save is: every rank of the (fake)
    group takes part in gathering what is saved."""
    if accelerator.project_configuration.checkpoint_format == "accelerate":
        raise NotImplementedError(
            "Hugging Face Accelerate's layout (checkpoint_format) is not measured"
        )
    sizes: dict[str, int] = {}
    with (
        tempfile.TemporaryDirectory() as temp,
        _measured_tensor_files(sizes),
        _gathers_by_shape(),
        warnings.catch_warnings(),
    ):
        # whether two tensors share storage decides only a copy, never a size
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        snap = take(accelerator, copy=False)
        everything = _written(snap, Path(temp) / "all", sizes)
        own = _written(dataclasses.replace(snap, main=[]), Path(temp) / "own", sizes)
    main = {name: size for name, size in everything.items() if name not in own}
    files = {"own": own, "main": main}
    if snap.rank == 0:
        files["manifest"] = _manifest_sizes(accelerator, everything)
    return files


def _manifest_sizes(accelerator: Any, files: Mapping[str, int]) -> dict[str, int]:
    """The manifest (written last, by the main process) as its size without file records
    (``base``) and the mean size of one record (``per_file``, from this rank's files)."""

    def measured(records: Mapping[str, int]) -> int:
        entries: dict[str, FileRecord] = {
            n: {"size": s, "crc32": "0" * 8} for n, s in records.items()
        }
        document = manifest_of(accelerator, Path("checkpoint"), entries)
        return len(json.dumps(document, indent=1).encode())

    base = measured({})
    return {"base": base, "per_file": -(-(measured(files) - base) // max(1, len(files)))}
