"""The offload folder: weights kept on disk, one file each, read back when a forward needs
them, with an ``index.json`` of their dtypes, shapes and file format.

Each weight goes to ``<folder>/<name>.dat`` (the file name Hugging Face Accelerate's index
expects) as a safetensors file: a self-describing header and the raw bytes, never a pickle.
Its index entry is Hugging Face Accelerate's (dtype and shape). Folders Accelerate wrote (a
bare array per ``.dat`` file) are read too: a ``.dat`` file is a safetensors file when it
begins as one, else a bare array of exactly its size; an entry that records a format (older
overdrive folders) is read as recorded.
Entries naming a ``safetensors_file`` (what transformers writes) are read from that file.
Every read is a checked plain read (``checked_files.py``), never a memory map.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypedDict, TypeVar, cast

import torch

from overdrive.bigmodel.checked_files import SafetensorsFile, is_safetensors, read_raw
from overdrive.bigmodel.device_map import Device

PathLike = str | os.PathLike[str]
INDEX = "index.json"
SAFETENSORS = "safetensors"  # the "format" older overdrive folders record in their index
_OPEN_FILES = 64  # safetensors files an OffloadedWeightsLoader keeps open
T = TypeVar("T")


class IndexEntry(TypedDict, total=False):
    """One weight of an offload index (``index.json``)."""

    dtype: str
    shape: list[int]
    format: str  # older overdrive folders: "safetensors"
    safetensors_file: str  # transformers' entries: the weight is read from that file
    weight_name: str  # its name there


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[1]


def offload_weight(
    weight: torch.Tensor,
    weight_name: str,
    offload_folder: PathLike,
    index: dict[str, IndexEntry] | None = None,
) -> dict[str, IndexEntry] | None:
    """Write ``weight`` to ``<offload_folder>/<weight_name>.dat``; record its dtype and shape
    in ``index`` (when given) and return it."""
    from safetensors.torch import save_file

    tensor = weight.detach().to("cpu").contiguous()
    save_file({weight_name: tensor}, str(Path(offload_folder) / f"{weight_name}.dat"))
    if index is not None:
        index[weight_name] = {"dtype": _dtype_name(tensor.dtype), "shape": list(tensor.shape)}
    return index


def _raw_dtype(name: str) -> torch.dtype:
    # Hugging Face Accelerate writes bfloat16 as int16 bits and float8 as int8 bits: read with
    # the dtype the index names, the same bytes are the original values.
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def _is_safetensors(path: Path, info: IndexEntry) -> bool:
    """Whether the ``.dat`` file of index entry ``info`` is a safetensors file: as an older
    folder's index records it, else by how the file begins, never by its size."""
    recorded = info.get("format")
    if recorded is not None:
        return recorded == SAFETENSORS
    return is_safetensors(path)


def load_offloaded_weight(weight_file: PathLike, weight_info: Mapping[str, object]) -> torch.Tensor:
    """The tensor an ``offload_weight`` file holds (``weight_info`` is its index entry)."""
    path = Path(weight_file)
    info = cast(IndexEntry, weight_info)
    if not _is_safetensors(path, info):
        return read_raw(path, _raw_dtype(info["dtype"]), tuple(info["shape"]))
    handle = SafetensorsFile(path)
    try:
        return handle.get_tensor(next(iter(handle.keys())))
    finally:
        handle.close()


def save_offload_index(index: Mapping[str, object] | None, offload_folder: PathLike) -> None:
    """Merge ``index`` into ``<offload_folder>/index.json`` (nothing to do when empty)."""
    if not index:
        return
    path = Path(offload_folder) / INDEX
    merged = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    merged.update(index)
    path.write_text(json.dumps(merged, indent=2), encoding="utf-8")


def offload_state_dict(save_dir: PathLike, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Write every tensor of ``state_dict`` to the offload folder ``save_dir``."""
    os.makedirs(save_dir, exist_ok=True)
    index: dict[str, IndexEntry] = {}
    for name, tensor in state_dict.items():
        offload_weight(tensor, name, save_dir, index)
    save_offload_index(index, save_dir)


class PrefixedDataset(Mapping[str, T]):
    """The entries of ``dataset`` whose keys start with ``prefix``, looked up without it."""

    def __init__(self, dataset: Mapping[str, T], prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> T:
        return self.dataset[f"{self.prefix}{key}"]

    def __iter__(self) -> Iterator[str]:
        cut = len(self.prefix)
        return (k[cut:] for k in self.dataset if k.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for k in self.dataset if k.startswith(self.prefix))


class OffloadedWeightsLoader(Mapping[str, torch.Tensor]):
    """Weights by name from a state dict in memory, else from an offload folder or index
    (read when asked for, onto ``device`` for ``safetensors_file`` entries)."""

    def __init__(
        self,
        state_dict: dict[str, torch.Tensor] | None = None,
        save_folder: PathLike | None = None,
        index: Mapping[str, Mapping[str, object]] | None = None,
        device: Device | None = None,
    ) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise ValueError(
                "Need either a `state_dict`, a `save_folder` or an `index` containing "
                "offloaded weights."
            )
        self.state_dict = {} if state_dict is None else state_dict
        self.save_folder = save_folder
        if index is None and save_folder is not None:
            index = json.loads((Path(save_folder) / INDEX).read_text())
        self.index = cast("Mapping[str, IndexEntry]", {} if index is None else index)
        self.all_keys = [*self.state_dict, *(k for k in self.index if k not in self.state_dict)]
        self.device = device

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        info = self.index[key]
        if info.get("safetensors_file") is not None:
            return self._from_safetensors(key, info)
        if self.save_folder is None:
            raise KeyError(f"{key}: its index entry names no file and there is no save_folder")
        path = Path(self.save_folder) / f"{key}.dat"
        if not _is_safetensors(path, info):  # Hugging Face Accelerate's bare array
            return read_raw(path, _raw_dtype(info["dtype"]), tuple(info["shape"]))
        return self._handle(str(path)).get_tensor(key)  # offload_weight names it by the key

    def _handle(self, path: str) -> SafetensorsFile:
        """An open safetensors file, kept for the next weight read from it (a forward reads
        every offloaded weight again, and opening a file parses its header); each read checks
        the file is still as it was when opened."""
        with self.__dict__.setdefault("_handles_lock", threading.Lock()):
            handles: OrderedDict[str, SafetensorsFile] = self.__dict__.setdefault(
                "_handles", OrderedDict()
            )
            handle = handles.pop(path, None)
            if handle is None:
                handle = SafetensorsFile(path)
                while len(handles) >= _OPEN_FILES:
                    handles.popitem(last=False)
            handles[path] = handle
            return handle

    def _from_safetensors(self, key: str, info: IndexEntry) -> torch.Tensor:
        device = "cpu" if self.device is None else self.device
        tensor = self._handle(info["safetensors_file"]).get_tensor(info.get("weight_name", key))
        if "dtype" in info:
            tensor = tensor.to(getattr(torch, info["dtype"]))
        return tensor.to(device)

    def __iter__(self) -> Iterator[str]:
        return iter(self.all_keys)

    def __len__(self) -> int:
        return len(self.all_keys)


def extract_submodules_state_dict(
    state_dict: Mapping[str, T], submodule_names: list[str]
) -> dict[str, T]:
    """The entries of ``state_dict`` under any of ``submodule_names`` (a name or its
    ``name.`` prefix: ``h.1`` does not take ``h.10``)."""
    found: dict[str, T] = {}
    for module in submodule_names:
        found.update(
            {k: v for k, v in state_dict.items() if k == module or k.startswith(module + ".")}
        )
    return found
