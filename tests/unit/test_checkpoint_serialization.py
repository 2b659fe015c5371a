"""State trees to safetensors + JSON and back, without pickle."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from overdrive.checkpoint import CheckpointError, UnsafeCheckpointError
from overdrive.checkpoint.serialization import flatten, load_tree, save_tree, unflatten


def _adam_state() -> dict:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return opt.state_dict()


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def test_optimizer_state_round_trips_exactly(tmp_path: Path) -> None:
    state = _adam_state()
    save_tree(state, tmp_path, "opt", what="optimizer 0")
    back = load_tree(tmp_path, "opt", what="optimizer 0")
    assert _equal(state, back)
    assert isinstance(next(iter(back["state"])), int)  # int keys stay ints
    assert back["param_groups"][0]["betas"] == (0.8, 0.9)
    # The tensors are plain safetensors and the structure is strict JSON.
    tensors = load_file(str(tmp_path / "opt.safetensors"))
    assert {t.numel() for t in tensors.values()} >= {1, 6}
    json.loads((tmp_path / "opt.json").read_text())


def test_awkward_values_round_trip() -> None:
    tree = {
        "inf": math.inf,
        "nan": math.nan,
        "neg": -math.inf,
        "tuple": (1, "a", None, True),
        "int_keys": {3: "x", (1, 2): "y"},
        "__reserved": 1,
        "dtype": torch.bfloat16,
        "device": torch.device("cpu"),
        "array": np.arange(6, dtype=np.int16).reshape(2, 3),
        "np_scalar": np.float32(1.5),
        "empty": torch.empty(0, 4),
        "scalar_tensor": torch.tensor(7),
        "size": torch.Size([2, 3]),
    }
    structure, tensors = flatten(tree, what="x")
    json.dumps(structure, allow_nan=False)
    back = unflatten(structure, tensors, what="x")
    assert back.pop("np_scalar").dtype == np.float32
    tree.pop("np_scalar")
    back["size"] = torch.Size(back["size"])
    assert _equal({**tree, "size": tuple(tree["size"])}, {**back, "size": tuple(back["size"])})


def test_tensors_sharing_memory_are_stored_separately(tmp_path: Path) -> None:
    base = torch.arange(10.0)
    tree = {"a": base, "b": base, "view": base[2:5], "t": base.view(2, 5).t()}
    save_tree(tree, tmp_path, "s", what="shared")
    back = load_tree(tmp_path, "s", what="shared")
    assert torch.equal(back["view"], torch.tensor([2.0, 3.0, 4.0]))
    assert torch.equal(back["t"], base.view(2, 5).t())
    back["a"][0] = 100  # independent copies after loading
    assert back["b"][0] == 0


def test_unsupported_value_names_where_it_is() -> None:
    with pytest.raises(CheckpointError, match=r"custom object 0 at state_dict\(\)\['fn'\]"):
        flatten({"fn": lambda: 1}, what="custom object 0")


class _Payload:
    """Unpickling this runs code: it creates the file named in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_pickle_file_is_refused_without_opt_in(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    (tmp_path / "opt.bin").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(UnsafeCheckpointError, match="allow_unsafe_pickle=True"):
        load_tree(tmp_path, "opt", what="optimizer 0")
    assert not marker.exists()


def test_trusted_legacy_file_loads_with_opt_in(tmp_path: Path) -> None:
    torch.save({"step": torch.tensor(3)}, tmp_path / "opt.bin")
    back = load_tree(tmp_path, "opt", what="optimizer 0", allow_unsafe_pickle=True)
    assert back["step"].item() == 3


def test_pickle_posing_as_safetensors_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    save_tree({"w": torch.ones(2)}, tmp_path, "m", what="model 0")
    (tmp_path / "m.safetensors").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError, match="m.safetensors is not a readable safetensors"):
        load_tree(tmp_path, "m", what="model 0")
    assert not marker.exists()
