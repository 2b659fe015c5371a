"""Big-model inference on a CPU host: models spread over the CPU and the disk by a device
map give the whole model's outputs, the disk holds safetensors (never pickles), and the
weights come back whole when saved."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

from overdrive import Accelerator
from overdrive.big_modeling import (
    cpu_offload,
    disk_offload,
    dispatch_model,
    init_empty_weights,
    load_checkpoint_and_dispatch,
)
from overdrive.errors import ConfigError
from overdrive.hooks import remove_hook_from_submodules
from overdrive.utils import has_offloaded_params


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.linear(x))) + x


def _model(blocks: int = 4, width: int = 16, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(OrderedDict((f"b{i}", Block(width)) for i in range(blocks)))
    model.eval()
    for block in model:  # non-trivial running statistics, so buffers matter
        block.norm.running_mean.uniform_(-1, 1)  # type: ignore[operator]
        block.norm.running_var.uniform_(0.5, 2)  # type: ignore[operator]
    return model


def _is_safetensors(path: Path) -> bool:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return len(list(handle.keys())) == 1


def test_dispatch_over_cpu_and_disk_gives_the_whole_models_outputs(tmp_path: Path) -> None:
    model = _model()
    x = torch.randn(5, 16)
    expected = model(x)
    device_map = {"b0": "cpu", "b1": "disk", "b2": "cpu", "b3": "disk"}
    dispatch_model(model, device_map, offload_dir=tmp_path)
    assert model.hf_device_map == device_map
    assert model.b1.linear.weight.device.type == "meta"  # on disk between forwards
    assert model.b0.linear.weight.device.type == "cpu"
    assert torch.equal(model(x), expected)
    assert model.b1.linear.weight.device.type == "meta"  # back on disk after the forward
    index = json.loads((tmp_path / "index.json").read_text())
    assert set(index) == {
        f"b{i}.{name}"
        for i in (1, 3)
        for name in ("linear.weight", "linear.bias", "norm.weight", "norm.bias")
    } | {
        f"b{i}.norm.{b}"
        for i in (1, 3)
        for b in ("running_mean", "running_var", "num_batches_tracked")
    }
    files = sorted(tmp_path.glob("*.dat"))
    assert files and all(_is_safetensors(f) for f in files)


def test_dispatch_with_disk_and_no_folder_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="offload_dir"):
        dispatch_model(_model(), {"b0": "cpu", "b1": "disk", "b2": "cpu", "b3": "cpu"})
    with pytest.raises(ConfigError, match="the whole model to 'disk'"):
        dispatch_model(_model(), {"": "disk"})
    with pytest.raises(ValueError, match="does not give any device"):
        dispatch_model(_model(), {"b0": "cpu"})


def test_cpu_and_disk_offload_keep_outputs_and_detach_restores(tmp_path: Path) -> None:
    x = torch.randn(3, 16)
    for offload in ("cpu", "disk"):
        model = _model(seed=1)
        expected = model(x)
        if offload == "cpu":
            cpu_offload(model, execution_device=torch.device("cpu"))
        else:
            disk_offload(model, tmp_path / "folder", execution_device=torch.device("cpu"))
        assert has_offloaded_params(model.b0.linear)
        assert torch.equal(model(x), expected)
        remove_hook_from_submodules(model)
        assert model.b0.linear.weight.device.type == "cpu"
        assert torch.equal(model(x), expected)


def test_an_accelerate_written_offload_folder_is_read(tmp_path: Path) -> None:
    """Hugging Face Accelerate's ``.dat`` files are bare memory maps (bfloat16 as int16 bits)."""
    import numpy as np

    from overdrive.utils import OffloadedWeightsLoader

    weights = {"a": torch.randn(3, 4), "b": torch.randn(5).to(torch.bfloat16), "c": torch.tensor(7)}
    index = {}
    for name, tensor in weights.items():
        raw = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
        array = raw.numpy()[None] if raw.ndim == 0 else raw.numpy()
        array.tofile(tmp_path / f"{name}.dat")
        dtype = str(tensor.dtype).split(".")[1]
        index[name] = {"dtype": dtype, "shape": list(tensor.shape)}
    (tmp_path / "index.json").write_text(json.dumps(index))
    loaded = OffloadedWeightsLoader(save_folder=tmp_path)
    for name, tensor in weights.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor)
    assert np.fromfile(tmp_path / "a.dat", dtype=np.float32).size == 12  # still raw, unchanged


def test_load_checkpoint_and_dispatch_auto_within_a_cpu_budget(tmp_path: Path) -> None:
    saved = _model(blocks=6, width=32, seed=2)
    x = torch.randn(4, 32)
    expected = saved(x)
    Accelerator(cpu=True).save_model(saved, tmp_path / "ckpt", max_shard_size="10KB")
    assert (tmp_path / "ckpt" / "model.safetensors.index.json").is_file()
    total = sum(t.numel() * t.element_size() for t in saved.state_dict().values())
    with init_empty_weights():
        empty = _model(blocks=6, width=32, seed=3)
    model = load_checkpoint_and_dispatch(
        empty,
        tmp_path / "ckpt",
        device_map="auto",
        max_memory={"cpu": total // 3},
        no_split_module_classes=["Block"],
        offload_folder=tmp_path / "offload",
    )
    places = set(model.hf_device_map.values())
    assert places == {"cpu", "disk"}, model.hf_device_map
    assert all(key.count(".") == 0 for key in model.hf_device_map)  # blocks kept whole
    assert torch.equal(model(x), expected)


def test_save_model_of_an_offloaded_model_writes_the_real_weights(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    model = _model(seed=4)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    dispatch_model(
        model, {"b0": "cpu", "b1": "disk", "b2": "disk", "b3": "cpu"}, offload_dir=tmp_path / "o"
    )
    Accelerator(cpu=True).save_model(model, tmp_path / "out")
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert written.keys() == original.keys()
    for name, tensor in original.items():
        assert torch.equal(written[name], tensor), name


def test_tied_weights_are_placed_together_and_stay_one_tensor(tmp_path: Path) -> None:
    from overdrive.utils import find_tied_parameters, infer_auto_device_map

    torch.manual_seed(5)
    parts = [("embed", nn.Embedding(10, 8))]
    parts += [(f"b{i}", nn.Linear(8, 8)) for i in range(3)]
    parts += [("head", nn.Linear(8, 10, bias=False))]
    model = nn.Sequential(OrderedDict(parts))
    model.head.weight = model.embed.weight  # type: ignore[assignment]
    ids = torch.tensor([[1, 2, 3]])
    expected = model(ids)
    assert find_tied_parameters(model) == [["embed.weight", "head.weight"]]
    # 320 bytes for the tied pair, 288 per block; the CPU keeps room for the largest layer.
    device_map = infer_auto_device_map(model, max_memory={"cpu": 900})
    assert device_map == {"embed": "cpu", "head": "cpu", "b0": "cpu", "b1": "disk", "b2": "disk"}
    dispatch_model(model, device_map, offload_dir=tmp_path)
    assert model.head.weight is model.embed.weight  # kept in memory: still one tensor
    assert torch.equal(model(ids), expected)
    remove_hook_from_submodules(model)
    on_disk = {"embed": "disk", "b0": "cpu", "b1": "cpu", "b2": "cpu", "head": "disk"}
    dispatch_model(model, on_disk, offload_dir=tmp_path / "second")
    assert torch.equal(model(ids), expected)  # the tie read from disk for each forward
