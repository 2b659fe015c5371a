"""load_checkpoint_in_model / load_checkpoint_and_dispatch: what save_model writes (one file,
safetensors shards with an index, or a torch file read without unpickling code) loads back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from overdrive import Accelerator
from overdrive.errors import ConfigError
from overdrive.utils.modeling import get_state_dict_from_offload, load_checkpoint_in_model


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("shard", [None, 100])
def test_save_model_output_loads_back(tmp_path: Path, safe: bool, shard: int | None) -> None:
    saved, other = _model(0), _model(1)
    kwargs = {"max_shard_size": shard} if shard else {}
    Accelerator(cpu=True).save_model(saved, tmp_path, safe_serialization=safe, **kwargs)
    if shard:
        assert len(list(tmp_path.glob("*.index.json"))) == 1
    load_checkpoint_in_model(other, tmp_path, strict=True)
    for a, b in zip(saved.state_dict().values(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_strict_loading_names_the_unknown_weights_and_disk_needs_a_folder(
    tmp_path: Path,
) -> None:
    Accelerator(cpu=True).save_model(nn.Linear(4, 8), tmp_path)
    with pytest.raises(ConfigError, match="the model does not have"):
        load_checkpoint_in_model(_model(0), tmp_path, strict=True)
    with pytest.raises(ConfigError, match="offload_folder"):
        load_checkpoint_in_model(nn.Linear(4, 8), tmp_path, device_map={"": "disk"})
    from overdrive import load_checkpoint_and_dispatch

    model = load_checkpoint_and_dispatch(nn.Linear(4, 8), tmp_path, device_map="auto")
    assert model.weight.device.type == "cpu"
    wanted = {"x.weight": None, "x.bias": None}
    got = get_state_dict_from_offload(model, "x.weight", wanted, device_to_put_offload="cpu")
    assert torch.equal(got["x.weight"], model.weight) and torch.equal(got["x.bias"], model.bias)
