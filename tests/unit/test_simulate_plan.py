"""``overdrive plan``: the layouts it considers, the arithmetic that rules some out, the config
file it writes (accepted by ``overdrive config validate``), and a small plan end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.errors import ConfigError

pytest.importorskip("transformers")

from overdrive.memory_estimate.build import load_spec  # noqa: E402
from overdrive.simulate.plan import Candidate, candidates, config_text, parse_memory  # noqa: E402

TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
    "tie_word_embeddings": False,
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(os.environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    return folder


def test_gpu_memory_sizes() -> None:
    assert parse_memory("80GiB") == 80 * 2**30
    assert parse_memory("80GB") == 80 * 10**9
    assert parse_memory("1.5 TiB") == int(1.5 * 2**40)
    assert parse_memory("4096") == 4096
    with pytest.raises(ConfigError, match="--gpu_memory 'lots' is not a size"):
        parse_memory("lots")


def test_the_candidates_keep_whole_heads_and_a_layer_per_stage(tiny: Path) -> None:
    spec = load_spec(str(tiny), library_name="transformers")
    found = {(c.dp_shard, c.tp, c.pp) for c in candidates(spec, 8, 8)}
    # 2 key/value heads: tp 4 and 8 ruled out; 2 layers: pp 4 and 8 ruled out
    assert found == {(8, 1, 1), (4, 2, 1), (4, 1, 2), (2, 2, 2)}
    assert {c.tp for c in candidates(spec, 8, 1)} == {1}  # tp stays inside one machine


@pytest.mark.parametrize(("gpus", "ip"), [(8, None), (16, "10.0.0.1")])
def test_the_written_file_passes_config_validate(
    tmp_path: Path, gpus: int, ip: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = Candidate(tp=2, pp=2, dp_shard=gpus // 4, state_bytes=0)
    path = tmp_path / "plan.yaml"
    path.write_text(config_text(candidate, gpus, 8, "LlamaDecoderLayer", ip))
    assert main(["config", "validate", str(path)]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: valid"), out


def test_a_model_too_large_for_the_gpus_is_ruled_out_by_arithmetic(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.yaml"
    argv = ["plan", "--model", str(tiny), "--gpus", "8", "--gpu_memory", "1KiB"]
    assert main([*argv, "--output", str(out)]) == 2
    captured = capsys.readouterr()
    assert "dp_shard=8: ruled out: parameters, gradients and AdamW state alone" in captured.out
    assert "sequence length from the model's max_position_embeddings" in captured.out
    assert "no layout of 8 GPUs fits" in captured.err and "Traceback" not in captured.err
    assert not out.exists()


@pytest.mark.extended  # about 60 s: two simulated candidates
def test_a_plan_simulates_ranks_and_writes_a_file_that_validates(
    tiny: Path, tmp_path: Path
) -> None:
    out, cost = tmp_path / "plan.yaml", tmp_path / "cost.yaml"
    cost.write_text("flops_per_second: 1.0e+12\nbandwidth: {intra_node: 1.0e+9}\n")
    argv = ["plan", "--model", str(tiny), "--gpus", "8", "--gpu_memory", "80GiB"]
    argv += ["--batch", "2", "--max_simulated", "2", "--output", str(out), "--cost", str(cost)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", *argv], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0].strip(): line for line in done.stdout.splitlines()}
    assert "fits (state" in lines["dp_shard=8"] and "simulated peak" in lines["dp_shard=8"]
    assert "fits (state" in lines["dp_shard=4 x tp=2"]
    assert "not simulated (over the cap)" in lines["dp_shard=4 x pp=2"]
    steps = [
        float(lines[n].split("step ")[1].split(" s")[0])
        for n in ("dp_shard=8", "dp_shard=4 x tp=2")
    ]
    chosen = "dp_shard=8" if steps[0] <= steps[1] else "dp_shard=4 x tp=2"
    assert f"chosen: {chosen};" in done.stdout  # the faster estimated step
    assert f"written to {out}" in done.stdout
    validated = subprocess.run(
        [sys.executable, "-m", "overdrive", "config", "validate", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert validated.returncode == 0, validated.stderr
    assert "fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer" in out.read_text()
