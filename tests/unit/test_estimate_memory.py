"""`overdrive estimate-memory`: its figures against bytes measured on a real model, its
arithmetic for sharding, tp and pp, and its errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.errors import ConfigError
from overdrive.memory_estimate import STRATEGIES, ModelSpec, TensorSpec, estimate, layout_of
from overdrive.memory_estimate.arithmetic import check_layout, stage_of
from tests.helpers.dist import SCRIPTS, clean_env

TOLERANCE = 0.15
STRATEGY = {s.name: s for s in STRATEGIES}


def tiny_llama_config(directory: Path) -> Path:
    """The tiny Llama of the issue: hidden 64, 4 heads, 2 layers, vocabulary 128."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    config.save_pretrained(directory)
    return directory / "config.json"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["estimate-memory", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def row(report: dict, strategy: str, dtype: str = "fp32") -> dict:
    (found,) = [r for r in report["estimates"] if r["strategy"] == strategy and r["dtype"] == dtype]
    return found


def measuring_script():  # the distributed script, imported to measure in this process
    spec = importlib.util.spec_from_file_location("memory_bytes", SCRIPTS / "memory_bytes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_close(estimated: int, measured: int, what: str) -> None:
    assert measured > 0, what
    assert abs(estimated - measured) <= TOLERANCE * measured, (what, estimated, measured)


def test_tiny_llama_matches_one_process_measurement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from overdrive.accelerator import Accelerator

    config = tiny_llama_config(tmp_path)
    report = run_json(capsys, str(config), "--dtypes", "fp32", "--strategies", "DDP")
    script = measuring_script()
    acc = Accelerator(cpu=True)
    model = script.build(str(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = acc.prepare(model, optimizer)
    script.step(acc, model, optimizer)
    measured = script.measure(model, optimizer)
    estimated = row(report, "DDP")
    assert report["model"]["parameters"] == sum(p.numel() for p in model.parameters())
    for part in ("params", "grads", "optimizer"):
        assert_close(estimated[part], measured[part], part)


def test_module_class_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "net.py").write_text(
        "from torch import nn\n\n"
        "class Net(nn.Sequential):\n"
        "    def __init__(self):\n"
        "        super().__init__(*[nn.Linear(32, 32) for _ in range(3)])\n"
    )
    report = run_json(capsys, f"{tmp_path / 'net.py'}:Net", "--num_processes", "2")
    params = 3 * (32 * 32 + 32)
    assert report["model"]["parameters"] == params
    assert report["model"]["layers"] == 3
    assert row(report, "DDP")["params"] == params * 4
    assert row(report, "FSDP FULL_SHARD")["params"] == params * 4 // 2
    assert row(report, "DDP")["activations"] is None  # no config: no activation formula


def spec(*tensors: TensorSpec, layers: int = 2, heads: int | None = 4) -> ModelSpec:
    return ModelSpec(
        source="test",
        class_name="T",
        tensors=tensors,
        num_layers=layers,
        hidden_size=8 if heads else None,
        num_heads=heads,
        vocab_size=16,
    )


EMBED = TensorSpec("embed", (16, 8), "embed", before_layers=True)


def layers(count: int) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(f"layers.{i}.w", (8, 8), f"layers.{i}.w", layer=i, tp_dim=0)
        for i in range(count)
    )


LAYERS = layers(2)
HEAD = TensorSpec("head", (16, 8), "head")


def test_zero_stages_shard_one_more_part_each() -> None:
    model = spec(EMBED, *LAYERS, HEAD)
    n = 16 * 8 * 2 + 8 * 8 * 2
    layout = layout_of(num_processes=4)
    rows = {name: estimate(model, layout, "fp32", STRATEGY[name]) for name in STRATEGY}
    assert (rows["DDP"].params, rows["DDP"].grads, rows["DDP"].optimizer) == (4 * n, 4 * n, 8 * n)
    assert rows["ZeRO-1"].optimizer == 8 * n // 4 and rows["ZeRO-1"].grads == 4 * n
    assert rows["ZeRO-2"].grads == 4 * n // 4 and rows["ZeRO-2"].params == 4 * n
    assert rows["ZeRO-3"].params == 4 * n // 4
    assert rows["FSDP FULL_SHARD"].state == rows["FSDP SHARD_GRAD_OP"].state == 16 * n // 4
    # SHARD_GRAD_OP keeps every layer gathered from forward to backward, FULL_SHARD two
    deep = spec(EMBED, *layers(6), HEAD, layers=6)
    grad_op = estimate(deep, layout, "bf16", STRATEGY["FSDP SHARD_GRAD_OP"])
    full = estimate(deep, layout, "bf16", STRATEGY["FSDP FULL_SHARD"])
    assert grad_op.working == 2 * (16 * 8 * 2 + 6 * 8 * 8)
    assert full.working == 2 * (16 * 8 * 2 + 2 * 8 * 8)


def test_mixed_precision_per_backend() -> None:
    model = spec(EMBED, *LAYERS, HEAD)
    n = 16 * 8 * 2 + 8 * 8 * 2
    layout = layout_of(num_processes=2)
    ddp = estimate(model, layout, "bf16", STRATEGY["DDP"])
    zero1 = estimate(model, layout, "bf16", STRATEGY["ZeRO-1"])
    fsdp = estimate(model, layout, "bf16", STRATEGY["FSDP FULL_SHARD"])
    assert (ddp.params, ddp.master) == (4 * n, 0)  # autocast: fp32 weights are the masters
    assert (zero1.params, zero1.grads, zero1.master) == (2 * n, 2 * n, 4 * n // 2)
    assert zero1.optimizer == (8 + 4) * n // 2
    assert (fsdp.params, fsdp.master) == (4 * n // 2, 0)


def test_tp_splits_only_planned_tensors_and_pp_splits_layers() -> None:
    model = spec(EMBED, *LAYERS, HEAD)
    tp2 = estimate(model, layout_of(num_processes=2, tp=2), "fp32", STRATEGY["DDP"])
    assert tp2.params == 4 * (16 * 8 * 2 + 8 * 8 * 2 // 2)  # embed and head replicated
    assert [stage_of(t, model, 2) for t in (EMBED, *LAYERS, HEAD)] == [0, 0, 1, 1]
    pp2 = estimate(model, layout_of(num_processes=2, pp=2), "fp32", STRATEGY["DDP"])
    assert pp2.params == 4 * (16 * 8 + 8 * 8)  # the fullest stage: one of each
    tied = TensorSpec("head", (16, 8), "embed")  # the LM head tied to the embedding
    assert estimate(spec(EMBED, *LAYERS, tied), layout_of(), "fp32", STRATEGY["DDP"]).params == (
        4 * (16 * 8 + 8 * 8 * 2)
    )


def test_activations_follow_the_formula() -> None:
    model = spec(EMBED, *LAYERS, HEAD)
    one = estimate(model, layout_of(), "bf16", STRATEGY["DDP"], batch_size=1, seq_len=4)
    two = estimate(model, layout_of(), "bf16", STRATEGY["DDP"], batch_size=2, seq_len=4)
    fp32 = estimate(model, layout_of(), "fp32", STRATEGY["DDP"], batch_size=1, seq_len=4)
    per_layer = 4 * 1 * 8 * (10 + 24 + 5 * 4 * 4 / 8)
    assert one.activations == int(2 * per_layer + 4 * 16 * 4)
    assert two.activations == 2 * one.activations
    assert fp32.activations == int(2 * 2 * per_layer + 4 * 16 * 4)


@pytest.mark.parametrize(
    ("degrees", "words"),
    [
        ({"num_processes": 6, "tp": 4}, "not a multiple of tp x pp"),
        ({"num_processes": 3, "tp": 3}, "does not divide the model's 4 attention heads"),
        ({"num_processes": 4, "pp": 4}, "needs at least 4 layers"),
    ],
)
def test_layouts_that_do_not_fit_are_config_errors(degrees: dict[str, int], words: str) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        check_layout(spec(EMBED, *LAYERS, HEAD), layout_of(**degrees))
    assert "fix:" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["/nonexistent/config.json"], "no such file, and not module:Class"),
        (["no_such_module_xyz:Net"], "cannot import 'no_such_module_xyz'"),
        (["meta-llama/Llama-3-8B", "--library_name", "transformers"], "downloads nothing"),
        (["json:NoSuchClass"], "json has no 'NoSuchClass'"),
        (["json:JSONDecoder"], "is not a torch.nn.Module"),
        (["torch.nn:Linear"], "Linear() failed on the meta device"),
        (["torch.nn:Identity", "--dtypes", "int8"], "int8/int4 are weight formats"),
        (["torch.nn:Identity", "--strategies", "ZeRO-4"], "no such strategy"),
    ],
)
def test_user_errors_exit_2_with_the_fix(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate-memory", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "fix:" in err and "Traceback" not in err


def test_a_degree_that_does_not_divide_exits_2_without_traceback(tmp_path: Path) -> None:
    config = tiny_llama_config(tmp_path)
    cmd = [sys.executable, "-m", "overdrive", "estimate-memory", str(config)]
    cmd += ["--num_processes", "6", "--tp", "4"]
    result = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "--num_processes 6 is not a multiple of tp x pp = 4 x 1 = 4" in result.stderr
    assert "fix:" in result.stderr and "Traceback" not in result.stderr


def test_the_sequence_length_is_the_models_own_by_default_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tiny_llama_config(tmp_path)  # max_position_embeddings 64
    report = run_json(capsys, str(config), "--strategies", "DDP")
    assert report["seq_len"] == 64
    assert "max_position_embeddings" in report["seq_len_source"]
    given = run_json(capsys, str(config), "--strategies", "DDP", "--seq_len", "8")
    assert (given["seq_len"], given["seq_len_source"]) == (8, "--seq_len")
    assert row(given, "DDP")["activations"] < row(report, "DDP")["activations"]
    assert main(["estimate-memory", str(config), "--strategies", "DDP"]) == 0
    assert "sequence length 64: the model's max_position_embeddings" in capsys.readouterr().out
