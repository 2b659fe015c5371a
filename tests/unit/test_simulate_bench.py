"""The simulation's cost bench (``bench/simulate``): each point is rank 0 of the world it names,
with 8 processes per machine, and one small point runs end to end and reports its cost."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "simulate"


def _run_module() -> ModuleType:
    """bench/simulate/run.py, loaded by path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_simulate_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_point_is_rank_0_of_its_world_at_8_processes_per_machine() -> None:
    argv = _run_module().command(16384, "405b", 8, "/tmp/r.json")
    flags = dict(zip(argv, argv[1:], strict=False))
    assert flags["--num_machines"] == "2048" and flags["--num_processes"] == "16384"
    assert flags["--simulate_ranks"] == "0" and flags["--simulate_steps"] == "1"
    assert flags["--parallelism_config_tp_size"] == "8"
    assert argv[-3:] == [str(BENCH / "llama.py"), "--shape", "405b"]


@pytest.mark.extended  # about 20 s: one simulated launch
def test_one_point_runs_and_reports_its_cost(tmp_path: Path) -> None:
    out = tmp_path / "points.json"
    args = ["--shape", "tiny", "--worlds", "64", "--shapes", "", "--tp", "2"]
    result = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "| 64 | tiny | dp_shard=32 x tp=2 |" in result.stdout
    (point,) = json.loads(out.read_text())
    assert point["wall_s"] >= point["rank_s"] > 0
    assert point["peak_rss_mib"] > 100  # the simulated rank imports torch and transformers
    tiny = 22_688 * 4  # the tiny Llama's fp32 parameters, head untied
    # a 64th of them, plus FSDP2's rounding of each shard's rows up (large on so small a model)
    assert tiny / 64 <= point["held_param_bytes"] < tiny / 32


def _tp_collectives(tmp_path: Path, *script_flags: str) -> dict:
    """The tensor-parallel group's collectives of the tiny shape's second step, simulated
    as rank 0 of dp_shard 2 x tp 2."""
    report = tmp_path / "report.json"
    launch = [sys.executable, "-m", "overdrive.cli.main", "launch", "--simulate", "--cpu"]
    launch += ["--simulate_ranks", "0", "--simulate_steps", "2", "--simulate_json", str(report)]
    launch += ["--num_processes", "4", "--oversubscribe", "--use_fsdp", "--fsdp_version", "2"]
    launch += ["--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]
    launch += ["--parallelism_config_tp_size", "2"]
    script = [str(BENCH / "llama.py"), "--shape", "tiny", "--seq", "16", *script_flags]
    result = subprocess.run([*launch, *script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (rank,) = json.loads(report.read_text())["ranks"]
    step = rank["collectives_per_step"][-1]
    return {
        kind: entry["groups"]["tp"]["count"]
        for kind, entry in step.items()
        if "tp" in entry["groups"]
    }


@pytest.mark.extended  # about 15 s: two simulated launches
def test_the_scripts_sequence_parallel_flag_splits_the_sequence_over_tp(tmp_path: Path) -> None:
    plain, split = _tp_collectives(tmp_path), _tp_collectives(tmp_path, "--sequence_parallel")
    # without it the rowwise outputs are all-reduced; with it they are reduce-scattered over
    # the sequence and gathered again before the next split block
    assert "reduce_scatter" not in plain and plain["all_reduce"] > 0
    assert split["reduce_scatter"] > 0 and split["all_gather"] > plain.get("all_gather", 0)
