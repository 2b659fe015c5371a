"""`overdrive launch --simulate` says what `save_state` would write, per rank and for the whole
checkpoint: checked file by file against a real 2-process save of the same script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.deepspeed import DS_ENV
from tests.helpers.dist import assert_ok, run_launch

pytest.importorskip("transformers")
pytestmark = pytest.mark.distributed

SCRIPT = "simulate_save.py"
FSDP2_SHARDED = [
    *("--use_fsdp", "--fsdp_version", "2"),
    *("--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"),
    *("--fsdp_state_dict_type", "SHARDED_STATE_DICT"),
]
FLAGS = {
    "fsdp2_sharded": FSDP2_SHARDED,
    "ddp": [],
    "zero2": ["--use_deepspeed", "--zero_stage", "2"],
}


def _sizes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _close(simulated: int, real: int, name: str) -> None:
    if name.endswith(".safetensors"):  # tensor files: from shapes and dtypes, exactly
        assert simulated == real, name
    else:  # JSON: the same structure, other numbers in it (RNG states, checksums)
        assert abs(simulated - real) <= max(64, 0.02 * real), (name, simulated, real)


@pytest.mark.parametrize(
    "layout",
    [
        "fsdp2_sharded",
        pytest.param("ddp", marks=pytest.mark.extended),
        pytest.param("zero2", marks=[pytest.mark.extended, pytest.mark.deepspeed]),
    ],
)  # make test keeps the sharded case: every rank writes its own shards, rank 0 more
def test_the_simulated_save_state_writes_the_files_of_the_real_one(
    layout: str, tmp_path: Path
) -> None:
    env = DS_ENV if layout == "zero2" else None
    real_dir, report = tmp_path / "real", tmp_path / "report.json"
    real = run_launch(SCRIPT, args=[str(real_dir)], launch_args=FLAGS[layout], env=env, timeout=420)
    assert_ok(real)
    sim = ["--simulate", "--simulate_json", str(report), *FLAGS[layout]]
    simulated = run_launch(
        SCRIPT, args=[str(tmp_path / "never")], launch_args=sim, env=env, timeout=420
    )
    assert_ok(simulated)
    assert not (tmp_path / "never").exists()  # stopped after its steps, before its own save
    document = json.loads(report.read_text())
    written = _sizes(real_dir)
    for rank in document["ranks"]:
        files = rank["checkpoint"]
        assert files["own"], files
        assert (rank["rank"] == 0) == bool(files["main"])  # the main process's files
        for name, size in {**files["own"], **files["main"]}.items():
            _close(size, written[name], name)
    whole = document["checkpoint"]
    assert whole["files"] == len(written)  # the manifest included
    assert abs(whole["bytes"] - sum(written.values())) <= 0.01 * sum(written.values())
    assert "the whole checkpoint (save_state): " in simulated.stdout
