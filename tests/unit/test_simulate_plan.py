"""``overdrive plan``: the layouts it considers (FSDP2 with HSDP replicas, tp, pp and activation
checkpointing, CPU offload, context parallelism, ZeRO 1-3) with their arithmetic, the
arithmetic that rules some out, the config file it writes (accepted by ``overdrive config
validate``), a plan where only activation checkpointing fits whose file launches, and a
larger plan end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.errors import ConfigError
from tests.helpers.env import forget_launcher

pytest.importorskip("transformers")

from overdrive.memory_estimate import STRATEGIES, estimate  # noqa: E402
from overdrive.memory_estimate.build import load_spec  # noqa: E402
from overdrive.parallel.layout import ParallelLayout  # noqa: E402
from overdrive.simulate.plan import (  # noqa: E402
    Candidate,
    candidates,
    config_text,
    layer_class,
    parse_memory,
    simulate_candidate,
)

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
    forget_launcher(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


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
    found = {
        (c.dp_shard, c.tp, c.pp)
        for c in candidates(spec, 8, 8)
        if (c.dp_replicate, c.cp, c.zero, c.checkpointing, c.offload) == (1, 1, 0, False, False)
    }
    # 2 key/value heads: tp 4 and 8 ruled out; 2 layers: pp 4 and 8 ruled out
    assert found == {(8, 1, 1), (4, 2, 1), (4, 1, 2), (2, 2, 2)}
    assert {c.tp for c in candidates(spec, 8, 1)} == {1}  # tp stays inside one machine


def _row(name: str, spec: object, layout: ParallelLayout) -> int:
    strategy = next(s for s in STRATEGIES if s.name == name)
    return estimate(spec, layout, "fp32", strategy).state  # type: ignore[arg-type]


def test_the_candidates_span_hsdp_checkpointing_offload_zero_and_cp(tiny: Path) -> None:
    """16 GPUs on 2 machines: HSDP with one replica per machine, each layout with activation
    checkpointing, FSDP2 with offload, ZeRO 1-3 and cp, each with its arithmetic, ordered by
    the bytes a rank sends (no recomputation before recomputation at equal bytes)."""
    spec = load_spec(str(tiny), library_name="transformers")
    found = candidates(spec, 16, 8, seq_len=32, batch=2)
    by_name = {c.name: c for c in found}
    plain, hsdp = by_name["dp_shard=16"], by_name["dp_replicate=2 x dp_shard=8"]
    # HSDP shards over its 8 ranks, not the 16: twice FSDP2's state, and more bytes sent
    assert hsdp.state_bytes == _row("FSDP FULL_SHARD", spec, ParallelLayout(dp_shard=8))
    assert plain.state_bytes == _row("FSDP FULL_SHARD", spec, ParallelLayout(dp_shard=16))
    assert hsdp.state_bytes > 1.9 * plain.state_bytes
    checkpointed = by_name["dp_shard=16 + activation checkpointing"]
    assert checkpointed.state_bytes == plain.state_bytes
    assert plain.activation_bytes and checkpointed.activation_bytes
    assert checkpointed.activation_bytes < plain.activation_bytes
    assert checkpointed.comm_bytes == plain.comm_bytes
    assert found.index(checkpointed) > found.index(plain)
    offloaded = by_name["dp_shard=16 + CPU offload"]
    assert offloaded.state_bytes == 0 and offloaded.activation_bytes == plain.activation_bytes
    for stage in (1, 2, 3):
        zero = by_name[f"ZeRO-{stage} dp=16"]
        layout = ParallelLayout(dp_replicate=16)
        assert zero.state_bytes == _row(f"ZeRO-{stage}", spec, layout)
        assert zero.floor_bytes == zero.state_bytes + 5 * 10**8 * 4  # the gradient bucket
    context = by_name["dp_shard=8 x cp=2"]
    assert context.state_bytes == plain.state_bytes  # shards over dp_shard x cp
    assert context.activation_bytes is not None
    assert context.activation_bytes < plain.activation_bytes
    # tp / pp keep their rules under HSDP too; every candidate comes once
    assert "dp_replicate=2 x dp_shard=2 x tp=2 x pp=2" in by_name
    assert len(by_name) == len(found)
    assert [c.comm_bytes for c in found] == sorted(c.comm_bytes for c in found)


KINDS = {
    "tp x pp": ({"tp": 2, "pp": 2}, "parallelism_config_pp_size: 2"),
    "hsdp x tp + checkpointing": (
        {"tp": 2, "pp": 1, "dp_replicate": 2, "checkpointing": True},
        "parallelism_config_dp_replicate_size: 2",
    ),
    "offload": ({"tp": 1, "pp": 1, "offload": True}, "fsdp_offload_params: true"),
    "cp": ({"tp": 1, "pp": 1, "cp": 2}, "parallelism_config_cp_size: 2"),
    "zero-3": ({"tp": 1, "pp": 1, "zero": 3}, "zero_stage: 3"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(("gpus", "ip"), [(8, None), (16, "10.0.0.1")])
def test_the_written_file_passes_config_validate(
    tmp_path: Path, gpus: int, ip: str | None, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    degrees, written = KINDS[kind]
    rest = degrees["tp"] * degrees["pp"] * degrees.get("dp_replicate", 1) * degrees.get("cp", 1)
    candidate = Candidate(dp_shard=gpus // rest, state_bytes=0, **degrees)  # type: ignore[arg-type]
    path = tmp_path / "plan.yaml"
    path.write_text(config_text(candidate, gpus, 8, "LlamaDecoderLayer", ip))
    assert written in path.read_text()
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


LAUNCHED = """
import json, sys
from transformers import AutoConfig, AutoModelForCausalLM
from overdrive.accelerator import Accelerator
from overdrive.simulate.plan_script import train_steps

config = AutoConfig.from_pretrained(sys.argv[1])
acc = Accelerator()
model = AutoModelForCausalLM.from_config(config)
train_steps(acc, model, config.vocab_size, 16, 2)
plugin = acc.state.fsdp_plugin
print(json.dumps({
    "world": acc.num_processes, "fsdp_version": plugin.fsdp_version,
    "checkpointing": plugin.activation_checkpointing,
    "layers": sum(bool(getattr(m, "_overdrive_checkpointed", False)) for m in model.modules()),
}))
"""


def test_only_activation_checkpointing_fits_and_the_written_file_launches(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4 x 512 tokens per GPU on 2 GPUs of 14 MiB, sized as CUDA's caching allocator
    reserves: plain FSDP2 is simulated and does not fit (16 MiB reserved, its activations),
    the same layout with activation checkpointing fits (12 MiB) and is written; ZeRO's
    default gradient bucket rules it out by arithmetic; the file validates and launches as
    is on 2 processes, every layer checkpointed."""
    config = json.loads((tiny / "config.json").read_text())
    (tiny / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    out = tmp_path / "plan.yaml"
    argv = ["plan", "--model", str(tiny), "--gpus", "2", "--gpu_memory", "14MiB"]
    assert main([*argv, "--batch", "4", "--max_simulated", "2", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line for line in printed.splitlines()}
    assert "memory sized for a CUDA GPU (--simulate_device cuda)" in printed
    assert "does not fit: simulated reserved peak" in lines["dp_shard=2"]
    assert ": fits (" in lines["dp_shard=2 + activation checkpointing"]
    assert (
        "ruled out: parameters, gradients, AdamW state and ZeRO's gradient bucket"
        in (lines["ZeRO-2 dp=2"])
    )
    assert (
        "not simulated: the simulated rank runs on this machine's CPU"
        in (lines["dp_shard=2 + CPU offload"])
    )
    assert "not simulated (over the cap)" in lines["dp_shard=1 x cp=2"]
    assert "chosen: dp_shard=2 + activation checkpointing;" in printed
    assert "fsdp_activation_checkpointing: true" in out.read_text()
    assert main(["config", "validate", str(out)]) == 0
    script = tmp_path / "train.py"
    script.write_text(LAUNCHED)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "overdrive", "launch", "--config_file", str(out)]
    done = subprocess.run(
        [*launch, "--no_rank_prefix", str(script), str(tiny)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert rows == [{"world": 2, "fsdp_version": 2, "checkpointing": True, "layers": 2}] * 2


def test_a_context_parallel_candidate_is_simulated_with_half_the_tokens_a_rank(
    tiny: Path, tmp_path: Path
) -> None:
    """dp_shard=2 x cp=2 against dp_shard=4 on 4 GPUs, 2 sequences of 512 tokens a rank: the
    same parameter, gradient and AdamW bytes (FSDP2 shards over dp_shard x cp), each rank's
    step in a context-parallel block with the ring's collectives on the cp dimension, and a
    smaller activation peak (each rank computes 256 tokens of each sequence)."""
    config = json.loads((tiny / "config.json").read_text())
    (tiny / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    spec = load_spec(str(tiny), library_name="transformers")
    by_name = {c.name: c for c in candidates(spec, 4, 8, seq_len=512, batch=2)}
    script_args = ["--model", str(tiny), "--seq_len", "512", "--batch", "2"]
    reports = {}
    for name in ("dp_shard=4", "dp_shard=2 x cp=2"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(config_text(by_name[name], 4, 8, layer_class(str(tiny)), None))
        reports[name] = simulate_candidate(by_name[name], str(path), script_args, False)
    plain, context = reports["dp_shard=4"], reports["dp_shard=2 x cp=2"]
    assert context["state_bytes"] == plain["state_bytes"]
    ring = context["collectives_per_step"][-1]
    assert {"all_gather", "all_to_all"} <= set(ring), ring
    assert set(ring["all_to_all"]["groups"]) == {"cp"}, ring
    assert "all_to_all" not in plain["collectives_per_step"][-1]
    activations = [r["peak_bytes"].get("Activation", 0) for r in (plain, context)]
    assert 0 < activations[1] < 0.75 * activations[0], activations


@pytest.mark.extended  # about 60 s: two simulated pipelines
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
    # fewest bytes sent first (the arithmetic's order): these two are simulated
    first, second = "dp_shard=2 x tp=2 x pp=2", "dp_replicate=2 x dp_shard=2 x pp=2"
    for name in (first, second):
        assert ": fits (state on the GPU" in lines[name], lines[name]
        assert "simulated reserved peak" in lines[name]
    assert "fits without activation checkpointing" in lines[f"{first} + activation checkpointing"]
    assert "not simulated (over the cap)" in lines["dp_shard=8"]
    steps = [float(lines[n].split("step ")[1].split(" s")[0]) for n in (first, second)]
    chosen = first if steps[0] <= steps[1] else second
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
