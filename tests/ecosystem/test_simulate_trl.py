"""TRL's own SFT script (from its wheel, unchanged) under ``overdrive launch --simulate``, as
the first and the last of 64 FSDP2 processes on 8 machines: each runs two optimizer steps of
the real ``SFTTrainer`` on fake tensors, sends FSDP2's collectives, holds a 64th of the model
and measures what ``save_state`` would write. Needs TRL from ``.ecosystem/site`` and the tiny
model and data ``python -m tests.ecosystem.run`` builds: collected only under
OVERDRIVE_ECOSYSTEM=1 (conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.ecosystem.build import asset_paths
from tests.ecosystem.cases import SFT, TRL, Case, fill
from tests.ecosystem.fetch import CACHE
from tests.ecosystem.run import environment, script_path

WORLD = ["--num_machines", "8", "--num_processes", "64", "--main_process_ip", "10.0.0.1"]
FSDP2 = ["--use_fsdp", "--fsdp_version", "2"]
LAYERS = ["--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]


def test_trl_sft_simulates_as_two_of_64_fsdp2_processes(tmp_path: Path) -> None:
    assets = {name: str(path) for name, path in asset_paths(CACHE / "assets").items()}
    case = Case("sft", TRL, "sft", SFT)
    report = tmp_path / "report.json"
    launch = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--as_accelerate"]
    launch += ["--simulate", "--simulate_steps", "2", "--simulate_json", str(report)]
    args = fill(case.args, assets, out=str(tmp_path / "out"))
    done = subprocess.run(
        [*launch, *WORLD, *FSDP2, *LAYERS, str(script_path(case)), *args],
        env=environment("overdrive", tmp_path, case),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(report.read_text())
    first, last = document["ranks"]
    assert (first["rank"], last["rank"], first["world_size"]) == (0, 63, 64)
    for rank in (first, last):
        assert rank["steps"] == 2
        step = rank["collectives_per_step"][-1]
        assert {"all_gather", "reduce_scatter"} <= set(step), step
        assert set(step["reduce_scatter"]["groups"]) == {"world"}
    # The tiny Llama's weights are too few to reach every one of 64 shards: FSDP2 gives each
    # parameter's rows to the first ranks, so rank 0 holds some of every one and rank 63 none.
    assert first["state_bytes"]["parameters"] > 0
    assert first["state_bytes"]["optimizer_state"] == 2 * first["state_bytes"]["parameters"]
    assert last["state_bytes"]["parameters"] == 0
    assert first["checkpoint"]["main"] and not last["checkpoint"]["main"]
    assert document["checkpoint"]["files"] >= 64  # each rank's own file, and the main one's
