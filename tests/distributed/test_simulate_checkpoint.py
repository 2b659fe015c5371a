"""`overdrive launch --simulate` against the real run of the same script: what `save_state`
writes, per rank and for the whole checkpoint (file by file), and each rank's peak memory in
the steps (by the same tracker, over real tensors in the real run: within 10%)."""

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
    "one_process": [],
    "ddp": [],
    "tp": ["--parallelism_config_tp_size", "2"],
    "pp": ["--parallelism_config_pp_size", "2"],
    "pp_fsdp2": ["--parallelism_config_pp_size", "2", *FSDP2_SHARDED],
    "zero2": ["--use_deepspeed", "--zero_stage", "2"],
    "zero3": ["--use_deepspeed", "--zero_stage", "3"],
}
PROCESSES = {"one_process": 1, "pp_fsdp2": 4}  # else 2
DEEPSPEED = {"zero2", "zero3"}
PIPELINE = {"pp", "pp_fsdp2"}


def _sizes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _close(simulated: int, real: int, name: str, layout: str) -> None:
    if name.endswith(".safetensors"):  # tensor files: from shapes and dtypes, exactly
        assert simulated == real, name
    elif layout in PIPELINE and name.startswith(("model_", "optimizer_")):
        # a stage's shard table lists the other stages' keys too, which it learns through an
        # object collective: simulated, every rank is taken to hold this one's keys
        assert simulated <= real, (name, simulated, real)
    else:  # JSON: the same structure, other numbers in it (RNG states, checksums)
        assert abs(simulated - real) <= max(64, 0.02 * real), (name, simulated, real)


@pytest.mark.parametrize(
    "layout",
    [
        "fsdp2_sharded",
        pytest.param("one_process", marks=pytest.mark.extended),
        pytest.param("ddp", marks=pytest.mark.extended),
        pytest.param("tp", marks=pytest.mark.extended),
        pytest.param("pp", marks=pytest.mark.extended),
        pytest.param("pp_fsdp2", marks=[pytest.mark.extended, pytest.mark.four_processes]),
        pytest.param("zero2", marks=[pytest.mark.extended, pytest.mark.deepspeed]),
        pytest.param("zero3", marks=[pytest.mark.extended, pytest.mark.deepspeed]),
    ],
)  # make test keeps the sharded case: every rank writes its own shards, rank 0 more
def test_the_simulated_rank_saves_and_peaks_as_the_real_one(layout: str, tmp_path: Path) -> None:
    nprocs = PROCESSES.get(layout, 2)
    env = {**(DS_ENV if layout in DEEPSPEED else {}), "REAL_PEAK": "1"}
    real_dir, report = tmp_path / "real", tmp_path / "report.json"
    real = run_launch(
        SCRIPT, nprocs=nprocs, args=[str(real_dir)], launch_args=FLAGS[layout], env=env,
        timeout=420,
    )  # fmt: skip
    assert_ok(real)
    peaks = [json.loads(line[5:]) for line in real.stdout.splitlines() if line.startswith("PEAK ")]
    sim = ["--simulate", "--simulate_json", str(report), *FLAGS[layout]]
    simulated = run_launch(
        SCRIPT, nprocs=nprocs, args=[str(tmp_path / "never")], launch_args=sim, timeout=420,
        env=DS_ENV if layout in DEEPSPEED else None,
    )  # fmt: skip
    assert_ok(simulated)
    assert not (tmp_path / "never").exists()  # stopped after its steps, before its own save
    document = json.loads(report.read_text())
    written = _sizes(real_dir)
    real_peak = {p["rank"]: p["Total"] for p in peaks}
    assert sorted(real_peak) == list(range(nprocs))
    for rank in document["ranks"]:
        files = rank["checkpoint"]
        assert files["own"], files
        assert (rank["rank"] == 0) == bool(files["main"])  # the main process's files
        for name, size in {**files["own"], **files["main"]}.items():
            _close(size, written[name], name, layout)
        mine, theirs = rank["peak_bytes"]["Total"], real_peak[rank["rank"]]
        assert abs(mine - theirs) <= 0.1 * theirs, (rank["rank"], mine, theirs)
    whole = document["checkpoint"]
    assert whole["files"] == len(written)  # the manifest included
    bound = 0.03 if layout in PIPELINE else 0.01  # the shard tables above
    assert abs(whole["bytes"] - sum(written.values())) <= bound * sum(written.values())
    assert "the whole checkpoint (save_state): " in simulated.stdout
