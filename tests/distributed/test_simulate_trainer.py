"""A transformers Trainer script under `overdrive launch --simulate`, against its real run:
the same parameter and optimizer bytes held, the same collectives in a step, kind by kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("transformers")
pytestmark = [pytest.mark.distributed, pytest.mark.extended]

SCRIPT = "simulate_trainer.py"
FSDP2 = [
    *("--use_fsdp", "--fsdp_version", "2"),
    *("--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"),
]


def test_a_trainer_script_simulates_as_it_runs_under_fsdp2(tmp_path: Path) -> None:
    real = run_launch(SCRIPT, args=[str(tmp_path / "real")], launch_args=FSDP2, timeout=420)
    assert_ok(real)
    measured = {row["rank"]: row for row in result_rows(real.stdout)}
    report = tmp_path / "report.json"
    sim = ["--simulate", "--simulate_steps", "3", "--simulate_json", str(report), *FSDP2]
    simulated = run_launch(SCRIPT, args=[str(tmp_path / "sim")], launch_args=sim, timeout=420)
    assert_ok(simulated)
    ranks = json.loads(report.read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for mine in ranks:
        theirs = measured[mine["rank"]]
        assert mine["finished"] == "stopped after 3 optimizer step(s)"
        # Trainer's callback reads after zero_grad (no gradients), the simulation in the step
        for key in ("parameters", "optimizer_state"):
            assert theirs["state_bytes"][key] > 0
            assert mine["state_bytes"][key] == theirs["state_bytes"][key], key
        last_mine, last_theirs = (
            mine["collectives_per_step"][-1],
            theirs["collectives_per_step"][-1],
        )
        assert last_mine == last_theirs
