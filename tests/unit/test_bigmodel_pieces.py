"""The big-model engine's pieces: sizes, memory budgets, maps, single tensors, the offload
folder's files."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

from overdrive.errors import ConfigError
from overdrive.utils import (
    CustomDtype,
    compute_module_sizes,
    convert_file_size_to_int,
    dtype_byte_size,
    get_balanced_memory,
    get_max_memory,
    infer_auto_device_map,
    offload_state_dict,
    offload_weight,
    set_module_tensor_to_device,
)
from overdrive.utils.modeling import clean_device_map, get_max_layer_size


def _three() -> nn.Module:
    return nn.Sequential(
        OrderedDict(linear1=nn.Linear(3, 4), batchnorm=nn.BatchNorm1d(4), linear2=nn.Linear(4, 5))
    )


def test_sizes_and_units() -> None:
    assert dtype_byte_size(torch.bfloat16) == 2 and dtype_byte_size(torch.bool) == 1 / 8
    assert dtype_byte_size(CustomDtype.INT4) == 1 / 2
    assert convert_file_size_to_int("2GiB") == 2 * 2**30
    assert convert_file_size_to_int("1.5GB") == 1_500_000_000
    assert convert_file_size_to_int("8Mb") == 1_000_000  # lower-case b: bits
    for bad in ("5MBB", "-1GB", "12"):
        with pytest.raises(ValueError, match="not in a valid format"):
            convert_file_size_to_int(bad)
    sizes = compute_module_sizes(_three())
    assert sizes["linear1"] == (12 + 4) * 4 and sizes["linear1.weight"] == 48
    # batchnorm: weight, bias, running mean/var (4 floats each) and an int64 counter
    assert sizes["batchnorm"] == 4 * 4 * 4 + 8
    assert sizes[""] == sizes["linear1"] + sizes["batchnorm"] + sizes["linear2"]
    half = compute_module_sizes(_three(), dtype=torch.float16)
    assert half["batchnorm"] == 4 * 4 * 2 + 8  # integers keep their size


def test_max_memory_is_parsed_ordered_and_checked() -> None:
    memory = get_max_memory({"disk": "1GB", "cpu": "10MiB", 1: 100, 0: "1KB"})
    assert list(memory) == [0, 1, "cpu", "disk"]
    assert memory == {0: 1000, 1: 100, "cpu": 10 * 2**20, "disk": 10**9}
    with pytest.raises(ConfigError, match="max_memory") as raised:
        get_max_memory({"gpu0": 10})
    assert "fix:" in str(raised.value)
    with pytest.raises(ConfigError, match=r"max_memory\['cpu'\]"):
        get_max_memory({"cpu": "lots"})
    # no GPU in the budget: nothing to balance, and the disk key is no device to torch
    assert get_balanced_memory(_three(), {"cpu": 300, "disk": 10**6}) == {"cpu": 300, "disk": 10**6}


def test_max_memory_converts_the_callers_dict_in_place() -> None:
    # transformers passes its user's max_memory and then reads that same dict back
    given = {"cpu": "4GB", "disk": 100}
    assert get_max_memory(given) == {"cpu": 4 * 10**9, "disk": 100}
    assert given == {"cpu": 4 * 10**9, "disk": 100}


def test_max_memory_takes_bytes_as_a_float() -> None:
    # get_balanced_memory keeps 90% of a single GPU (a float), and infer_auto_device_map reads
    # that budget back through get_max_memory (an AttributeError: float has no upper())
    assert get_max_memory({"cpu": 900.0, "disk": 100}) == {"cpu": 900.0, "disk": 100}
    with pytest.raises(ConfigError, match=r"max_memory\['cpu'\]"):
        get_max_memory({"cpu": -1.5})


def test_balanced_memory_over_two_gpus_leaves_the_last_its_whole_budget() -> None:
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])  # 288 bytes per layer
    memory = get_balanced_memory(model, max_memory={0: 10_000, 1: 10_000})
    share = 4 * 288 // 2 + int(1.25 * 288)
    assert memory == {0: share, 1: 10_000}


def test_auto_map_fills_devices_in_order_and_splits_only_what_it_may() -> None:
    model = nn.Sequential(OrderedDict(a=_three(), b=_three(), c=_three()))
    size = compute_module_sizes(model)["a"]
    largest, names = get_max_layer_size(
        list(model.named_children()), compute_module_sizes(model), []
    )
    assert names == ["a.linear2", "b.linear2", "c.linear2"] and largest == (20 + 5) * 4
    whole = infer_auto_device_map(
        model, max_memory={"cpu": size + largest}, no_split_module_classes=["Sequential"]
    )
    assert whole == {"": "disk"}  # "a" cannot be split, so it does not fit beside the reserve
    split = infer_auto_device_map(model, max_memory={"cpu": size + largest})
    assert split["a"] == "cpu" and "disk" in split.values()
    assert clean_device_map({"a.x": "cpu", "a.y": "cpu", "b": "disk"}) == {"a": "cpu", "b": "disk"}


def test_set_module_tensor_to_device_keeps_class_and_checks_shapes() -> None:
    model = _three()
    param = model.linear1.weight
    set_module_tensor_to_device(model, "linear1.weight", "meta")
    assert model.linear1.weight.is_meta and isinstance(model.linear1.weight, nn.Parameter)
    with pytest.raises(ValueError, match="we need a `value`"):
        set_module_tensor_to_device(model, "linear1.weight", "cpu")
    with pytest.raises(ValueError, match="this looks incorrect"):
        set_module_tensor_to_device(model, "linear1.weight", "cpu", value=torch.zeros(3, 3))
    value = torch.ones(4, 3, dtype=torch.float64)
    set_module_tensor_to_device(model, "linear1.weight", "cpu", value=value)
    assert model.linear1.weight.dtype == param.dtype  # cast to what the model held
    set_module_tensor_to_device(
        model, "batchnorm.num_batches_tracked", "cpu", value=torch.tensor(3), dtype=torch.float16
    )
    assert model.batchnorm.num_batches_tracked.dtype == torch.int64  # integers keep theirs
    with pytest.raises(ValueError, match="does not have a parameter or a buffer named nope"):
        set_module_tensor_to_device(model, "linear1.nope", "cpu")


def test_offload_folder_holds_safetensors_and_an_index(tmp_path: Path) -> None:
    from safetensors import safe_open

    index = offload_weight(torch.arange(6.0).view(2, 3).to(torch.bfloat16), "w", tmp_path, {})
    # Hugging Face Accelerate's index entry; the file's own header says it is safetensors
    assert index == {"w": {"dtype": "bfloat16", "shape": [2, 3]}}
    with safe_open(str(tmp_path / "w.dat"), framework="pt") as handle:
        assert torch.equal(handle.get_tensor("w").float(), torch.arange(6.0).view(2, 3))
    assert b"\x80\x04" not in (tmp_path / "w.dat").read_bytes()[:16]  # no pickle protocol
    offload_state_dict(tmp_path / "model", _three().state_dict())
    written = json.loads((tmp_path / "model" / "index.json").read_text())
    assert written["batchnorm.num_batches_tracked"] == {"dtype": "int64", "shape": []}
