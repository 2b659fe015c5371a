"""Issue 31: under ``SHARDED_STATE_DICT`` transformers' ``Trainer.save_model()`` writes no
weights. The first checkpoint warns with the one command that gets them, and that command
writes a folder ``from_pretrained`` loads (the model's config travels with the shards)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from overdrive.checkpoint import fsdp_files
from overdrive.cli.main import main
from overdrive.config.resolve import resolve
from overdrive.config.sources import from_mapping

transformers = pytest.importorskip("transformers")


def _tiny_llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=16,
    )
    return transformers.LlamaForCausalLM(config)


def _accelerator() -> Any:
    """What save_fsdp_model uses of an Accelerator: one process, a sharded-checkpoint strategy,
    the settings (with the state-dict type from a config file)."""
    key = "fsdp_config.fsdp_state_dict_type"
    settings = resolve(file=from_mapping({key: "SHARDED_STATE_DICT"}, "file", "fsdp2.yaml:8"))
    strategy = SimpleNamespace(
        sharded_checkpoints=True, state_dict=lambda model, sharded: model.state_dict()
    )
    return SimpleNamespace(
        strategy=strategy,
        settings=settings,
        process_index=0,
        is_main_process=True,
        unwrap_model=lambda model: model,
        wait_for_everyone=lambda: None,
    )


def test_the_first_sharded_checkpoint_warns_once_with_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fsdp_files, "_MERGE_NOTED", set())
    model, accelerator = _tiny_llama(), _accelerator()
    for step in (2, 4):
        fsdp_files.save_fsdp_model(
            None, accelerator, model, tmp_path / "run" / f"checkpoint-{step}"
        )
    err = capsys.readouterr().err
    folder = tmp_path / "run" / "checkpoint-2" / "pytorch_model_fsdp_0"
    assert err.count("overdrive: warning: fsdp_state_dict_type is SHARDED_STATE_DICT") == 1
    assert "(file fsdp2.yaml:8)" in err  # where the setting came from
    assert "Trainer.save_model() writes no weights" in err
    assert f"`overdrive merge-weights {folder} {folder.parent}-merged`" in err


def test_merge_weights_writes_a_folder_from_pretrained_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _tiny_llama()
    checkpoint = tmp_path / "run" / "checkpoint-4"
    folder = fsdp_files.save_fsdp_model(None, _accelerator(), model, checkpoint)
    assert (checkpoint / "config.json").is_file()  # beside the shards, as Trainer puts it
    assert sorted(p.name for p in folder.iterdir()) == [
        "model.rank0.json",
        "model.rank0.safetensors",
    ]
    merged = tmp_path / "merged"
    assert main(["merge-weights", str(folder), str(merged)]) == 0
    assert f"config.json copied from {checkpoint}" in capsys.readouterr().out
    loaded = transformers.LlamaForCausalLM.from_pretrained(merged)
    expected = model.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    assert all(torch.equal(loaded.state_dict()[k], expected[k]) for k in expected)


def test_merge_weights_says_where_the_config_must_go_when_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = fsdp_files.save_fsdp_model(
        None, _accelerator(), torch.nn.Linear(2, 2), tmp_path / "ckpt"
    )
    merged = tmp_path / "merged"
    assert main(["merge-weights", str(folder), str(merged)]) == 0
    out = capsys.readouterr().out
    assert f"note: no config.json in {folder.resolve()}, {folder.parent.resolve()}" in out
    assert f"model.config.save_pretrained('{merged}')" in out
    assert not (merged / "config.json").exists()
