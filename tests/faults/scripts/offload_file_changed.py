"""Change a weights file a model reads lazily after its first forward, then forward again.

``python offload_file_changed.py CASE FOLDER``; prints ``SAME`` or ``DIFFERENT`` (the second
forward's output against the first's) when the second forward returns at all.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch import nn


def _disk_model(folder: Path, width: int) -> tuple[nn.Module, torch.Tensor]:
    from overdrive.big_modeling import disk_offload

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.Linear(width, width)).eval()
    disk_offload(model, folder, execution_device=torch.device("cpu"))
    return model, torch.randn(2, width)


def _forward_twice(model: nn.Module, inputs: torch.Tensor, change) -> None:  # noqa: ANN001
    with torch.no_grad():
        first = model(inputs)
        change()
        second = model(inputs)
    print("SAME" if torch.equal(first, second) else "DIFFERENT", flush=True)


def _truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def _replace(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-4:] = b"\x00\x00\x80\x7f"  # the last value becomes +inf, the size stays
    other = path.with_suffix(".new")
    other.write_bytes(bytes(data))
    os.replace(other, path)


def _llama(folder: Path) -> tuple[nn.Module, torch.Tensor]:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    LlamaForCausalLM(config).save_pretrained(folder / "model")
    size = sum(p.numel() * p.element_size() for p in LlamaForCausalLM(config).parameters())
    model = AutoModelForCausalLM.from_pretrained(
        folder / "model",
        device_map="auto",
        max_memory={"cpu": size // 3},
        offload_folder=folder / "offload",
    )
    assert "disk" in set(model.hf_device_map.values()), model.hf_device_map
    return model, torch.tensor([[1, 5, 9, 3, 7]])


def main(case: str, folder: Path) -> None:
    if case in ("dat_half", "dat_big", "dat_replaced"):
        model, inputs = _disk_model(folder, 1024 if case == "dat_big" else 8)
        dat = folder / "0.weight.dat"
        if case == "dat_replaced":
            _forward_twice(model, inputs, lambda: _replace(dat))
        else:
            _forward_twice(model, inputs, lambda: _truncate(dat, dat.stat().st_size // 2))
    elif case == "loaded":  # loaded whole into memory: the file no longer matters
        from safetensors.torch import save_file

        from overdrive.big_modeling import init_empty_weights
        from overdrive.utils import load_checkpoint_in_model

        torch.manual_seed(0)
        weights = folder / "model.safetensors"
        save_file(nn.Linear(1024, 1024).state_dict(), str(weights), metadata={"format": "pt"})
        with init_empty_weights():
            model = nn.Linear(1024, 1024)
        load_checkpoint_in_model(model, weights, device_map={"": "cpu"})
        _forward_twice(model, torch.ones(1, 1024), lambda: _truncate(weights, 1000))
    elif case == "checkpoint":
        model, inputs = _llama(folder)
        weights = folder / "model" / "model.safetensors"
        _forward_twice(model, inputs, lambda: _truncate(weights, weights.stat().st_size - 4096))
    elif case in ("torn", "torn_unrecorded"):
        from overdrive.utils import OffloadedWeightsLoader, offload_state_dict

        offload_state_dict(folder, {"w": torch.arange(64, dtype=torch.float32)})
        if case == "torn_unrecorded":  # an index written before the format was recorded
            index = json.loads((folder / "index.json").read_text())
            index["w"].pop("format", None)
            (folder / "index.json").write_text(json.dumps(index))
        _truncate(folder / "w.dat", 64 * 4)  # exactly the raw array's size
        got = OffloadedWeightsLoader(save_folder=folder)["w"]
        print("SAME" if torch.equal(got, torch.arange(64.0)) else "DIFFERENT", flush=True)
    else:
        raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
