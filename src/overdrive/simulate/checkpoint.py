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
