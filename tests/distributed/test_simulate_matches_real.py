"""`overdrive launch --simulate` against the real run it stands for: the same tiny Llama
script, for real on gloo processes and simulated as ranks of the same world, sends the same
collectives in a step (counted on the real group by the script itself, in every process),
holds the same parameter, gradient and optimizer bytes, peaks within 10% of the real run's
memory (the same tracker over real tensors; reached in the same phase and module, or a
module inside or around it, but under pipeline parallelism and FSDP2 x TP; the communication buffers
within 10% of it too) and says what its `save_state` writes (file by
file against the real save), under one process, DDP, FSDP1, FSDP2 (full and sharded state
dicts), TP, FSDP2 x TP, PP, PP x FSDP2, PP x TP, PP x FSDP2 x TP (8 processes), context
parallelism over FSDP2 and DeepSpeed
ZeRO-0/1/2/3; a Llama-3-8B shape
simulated as one of 512 processes holds 1/512 of the model."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.deepspeed import DS_ENV
from tests.helpers.dist import assert_ok, finish_launch, result_rows, run_launch, start_launch

pytest.importorskip("transformers")

SCRIPT = "simulate_check.py"
FSDP2 = ["--use_fsdp", "--fsdp_version", "2"]
LAYERS = ["--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]
TP = ["--parallelism_config_tp_size", "2"]
PP = ["--parallelism_config_pp_size", "2"]
FLAGS = {
    "one_process": [],
    "ddp": [],
    "fsdp2": [*FSDP2, *LAYERS],
    "fsdp1": ["--use_fsdp", "--fsdp_version", "1", *LAYERS],
    "fsdp2_sharded": [*FSDP2, *LAYERS, "--fsdp_state_dict_type", "SHARDED_STATE_DICT"],
    "tp": TP,
    "fsdp2_tp": [*TP, *FSDP2, *LAYERS],
    "pp": PP,
    "pp_fsdp2": [*PP, *FSDP2, *LAYERS],
    "pp_tp": [*PP, *TP],
    "pp_fsdp2_tp": [*PP, *TP, *FSDP2, *LAYERS],
    "cp": [*FSDP2, *LAYERS, "--parallelism_config_cp_size", "2"],
    "zero0": ["--use_deepspeed", "--zero_stage", "0"],
    "zero1": ["--use_deepspeed", "--zero_stage", "1"],
    "zero2": ["--use_deepspeed", "--zero_stage", "2"],
    "zero3": ["--use_deepspeed", "--zero_stage", "3"],
}
PROCESSES = {"one_process": 1, "fsdp2_tp": 4, "pp_fsdp2": 4, "pp_tp": 4, "pp_fsdp2_tp": 8}
KINDS = {
    "one_process": set(),
    "ddp": {"all_reduce", "broadcast"},
    "fsdp2": {"all_gather", "reduce_scatter"},
    "fsdp1": {"all_gather", "reduce_scatter"},
    "fsdp2_sharded": {"all_gather", "reduce_scatter"},
    "tp": {"all_reduce", "all_gather"},  # the head's output gathered whole
    "fsdp2_tp": {"all_reduce", "all_gather", "reduce_scatter"},
    "pp": {"send", "recv"},
    "pp_fsdp2": {"send", "recv", "all_gather", "reduce_scatter"},
    "pp_tp": {"send", "recv", "all_reduce"},  # the last stage also gathers the head's output
    "pp_fsdp2_tp": {"send", "recv", "all_reduce", "all_gather", "reduce_scatter"},
    "cp": {"all_gather", "reduce_scatter", "all_to_all"},  # the ring: keys, values, gradients
    "zero0": {"all_reduce"},
    "zero1": {"all_reduce", "all_gather"},
    "zero2": {"all_reduce", "all_gather"},
    "zero3": {"all_reduce", "all_gather", "reduce_scatter"},
}
BOTH_ENDS = {
    "fsdp2",
    "fsdp2_sharded",
    "pp",
    "pp_fsdp2",
    "pp_tp",
    "pp_fsdp2_tp",
    "cp",
}  # simulated at the default ranks, the first and the last
DEEPSPEED = {"zero0", "zero1", "zero2", "zero3"}
PIPELINE = {"pp", "pp_fsdp2", "pp_tp", "pp_fsdp2_tp"}
MOMENT_VARIES = {"fsdp2_tp"}
"""Layouts whose real rank 0 peaks at another moment from run to run, so that the moment is
not compared: under FSDP2 x TP, in 15 of 65 runs here (alone or beside the simulation, with
Python's garbage collected at each step or not), at the end of the forward, holding 42,016
more bytes of activations (378,028 in all), otherwise in the backward (368,780); the
simulation, in the backward (368,764) every time. The cause is not known. The peak's bytes
are still compared, within 10% either way."""
# A communication buffer is live at the peak (measured on the real runs): FSDP2's staging,
# a pipeline stage's received tensors, ZeRO-3's gathered parameters.
LIVE_AT_PEAK = {"fsdp2", "fsdp2_sharded", "fsdp2_tp", "cp", "zero3", *PIPELINE}
# Every process writes what rank 0 writes of its own: the whole checkpoint follows from rank 0.
ALIKE = {"one_process", "ddp", "zero0", "zero1", "zero2", "zero3"}
NOT_MEASURED = {"fsdp1"}  # its optimizer state dict needs object collectives (docs/simulate.md)


def _simulate_flags(report: Path, ranks: list[str]) -> list[str]:
    return [*ranks, "--simulate", "--simulate_steps", "3", "--simulate_json", str(report)]


def _simulated(result: subprocess.CompletedProcess[str], report: Path, nprocs: int) -> dict:
    assert_ok(result)
    assert f"rank 0 of {nprocs}: stopped after 3 optimizer step(s)" in result.stdout, result.stdout
    return json.loads(report.read_text())


@pytest.mark.distributed
@pytest.mark.parametrize(
    "layout",
    [
        "fsdp2_sharded",
        "one_process",
        "ddp",
        "tp",
        "pp",
        pytest.param("pp_fsdp2", marks=pytest.mark.four_processes),
        pytest.param("zero2", marks=pytest.mark.deepspeed),
        pytest.param("zero3", marks=pytest.mark.deepspeed),
        pytest.param("fsdp2", marks=pytest.mark.extended),
        pytest.param("fsdp1", marks=pytest.mark.extended),
        pytest.param("fsdp2_tp", marks=[pytest.mark.extended, pytest.mark.four_processes]),
        pytest.param("pp_tp", marks=[pytest.mark.extended, pytest.mark.four_processes]),
        pytest.param("pp_fsdp2_tp", marks=[pytest.mark.extended, pytest.mark.four_processes]),
        pytest.param("cp", marks=pytest.mark.extended),
        pytest.param("zero0", marks=[pytest.mark.extended, pytest.mark.deepspeed]),
        pytest.param("zero1", marks=[pytest.mark.extended, pytest.mark.deepspeed]),
    ],
)  # make test holds the layouts Hugging Face Accelerate users start from: one process, DDP,
# FSDP2, TP, PP, pp x FSDP2 on 4 processes, ZeRO-2 and ZeRO-3 (7-26 s each, the real run and
# its simulation side by side); make extended adds the others
def test_a_simulated_step_sends_and_holds_what_the_real_one_does(
    layout: str, tmp_path: Path
) -> None:
    nprocs = PROCESSES.get(layout, 2)
    env = DS_ENV if layout in DEEPSPEED else None
    saved = tmp_path / "saved"
    ranks = [] if layout in BOTH_ENDS else ["--simulate_ranks", "0"]
    report = tmp_path / "report.json"
    # The real run and its simulation side by side: neither waits for the other's imports.
    real_run = start_launch(
        SCRIPT, nprocs=nprocs, args=[str(saved)], launch_args=FLAGS[layout],
        env={**(env or {}), "REAL_PEAK": "1"},
    )  # fmt: skip
    simulated_run = start_launch(
        SCRIPT, nprocs=nprocs, launch_args=[*_simulate_flags(report, ranks), *FLAGS[layout]],
        env=env,
    )  # fmt: skip
    real, simulation = finish_launch(real_run), finish_launch(simulated_run)
    assert_ok(real)
    measured = {row["rank"]: row for row in result_rows(real.stdout)}
    assert sorted(measured) == list(range(nprocs))
    simulated = _simulated(simulation, report, nprocs)
    expected = [0, nprocs - 1] if layout in BOTH_ENDS else [0]
    assert [r["rank"] for r in simulated["ranks"]] == expected
    for mine in simulated["ranks"]:
        theirs = measured[mine["rank"]]
        # The last step: DDP rebuilds its buckets in the second (two more broadcasts, for real).
        assert mine["collectives_per_step"][-1] == theirs["collectives_per_step"][-1]
        assert KINDS[layout] <= set(mine["collectives_per_step"][-1])
        for key, real_bytes in theirs["state_bytes"].items():
            if layout in DEEPSPEED and key != "optimizer_state":
                # counted inside ZeRO's step, on the fp32 partitions its optimizer steps;
                # after it (where the script counts) ZeRO has freed or swapped them
                continue
            assert real_bytes > 0
            assert abs(mine["state_bytes"][key] - real_bytes) <= 0.1 * real_bytes, key
        mine_peak, real_peak = mine["peak_bytes"]["Total"], theirs["peak"]["Total"]
        assert abs(mine_peak - real_peak) <= 0.1 * real_peak, (mine["rank"], mine_peak, real_peak)
        _check_communication_buffers(layout, mine["peak_bytes"], theirs["peak"])
        # a real stage's peak moves with the moment its sends end
        if layout not in PIPELINE | MOMENT_VARIES:
            _check_peak_moment(mine["peak_moment"], theirs["peak_moment"])
    _check_checkpoint(simulated, saved, layout)
    if layout == "pp":  # the first step's shape messages too (prepare's broadcasts aside)
        for mine in simulated["ranks"]:
            first = {k: v for k, v in mine["collectives_per_step"][0].items() if k != "broadcast"}
            assert first == measured[mine["rank"]]["collectives_per_step"][0]


def _unclaimed(peak: dict[str, int]) -> int:
    """What no parameter, gradient, optimizer state or module buffer holds at the peak."""
    return peak["Activation"] + peak["Temp"] + peak["Communication"]


def _check_communication_buffers(layout: str, mine: dict[str, int], theirs: dict[str, int]) -> None:
    """The peak's communication buffers are the real run's, within 10% of its peak, and
    present where the layout keeps one live at its peak (FSDP's all-gather and reduce-scatter
    staging, a pipeline stage's received tensors, ZeRO-3's gathered parameters).

    DDP aside: its real reducer rebuilds its buckets in the second step, where the
    simulation keeps the first ones, and the rebuilt bucket counts as communication from its
    first all-reduce, after that step's peak. There the simulated line holds the bucket
    (every gradient, in the tiny model's one bucket) and the real run counts it an
    activation: the two agree on what no parameter, gradient or state holds."""
    if layout == "ddp":
        assert mine["Communication"] == mine["Parameter"], mine
        assert abs(_unclaimed(mine) - _unclaimed(theirs)) <= 0.1 * theirs["Total"], (mine, theirs)
        return
    if layout in LIVE_AT_PEAK:
        assert theirs["Communication"] > 0, theirs
    assert abs(mine["Communication"] - theirs["Communication"]) <= 0.1 * theirs["Total"], (
        mine,
        theirs,
    )


def _check_peak_moment(mine: dict[str, str], theirs: dict[str, str]) -> None:
    """The simulated peak is reached in the real one's phase, and in its module or a module
    inside or around it, ``Global`` being around every module (measured: cp's rank 0 peaks
    in an attention block where the real run peaks in its decoder layer, at the block's
    end)."""
    assert mine["phase"] == theirs["phase"], (mine, theirs)
    a, b = mine["module"], theirs["module"]
    nested = a.startswith(b + ".") or b.startswith(a + ".") or "Global" in (a, b)
    assert a == b or nested, (mine, theirs)


def _check_checkpoint(document: dict, saved: Path, layout: str) -> None:
    """Each simulated rank's files are in the real checkpoint with their sizes; the whole
    checkpoint's count and bytes follow when the simulated ranks stand for every rank."""
    written = {str(p.relative_to(saved)): p.stat().st_size for p in saved.rglob("*") if p.is_file()}
    # Where every process holds the whole state, a process that reaches save_state after the
    # main process committed adds its directory with a record of its own (save_alone.py):
    # a matter of timing, which the simulation (taking every rank as on time) does not model.
    late = {name for name in written if re.fullmatch(r"rank_\d+/record\.json", name)}
    written = {name: size for name, size in written.items() if name not in late}
    for rank in document["ranks"]:
        files = rank["checkpoint"]
        if layout in NOT_MEASURED:
            assert "not_measured" in files, files
            continue
        assert (rank["rank"] == 0) == bool(files["main"]), files  # the main process's files
        for name, size in {**files["own"], **files["main"]}.items():
            real = written[name]
            if name.endswith(".safetensors"):  # from shapes and dtypes, exactly
                assert size == real, name
            elif layout in PIPELINE and name.startswith(("model_", "optimizer_")):
                # a stage's shard table also lists the other stages' keys, learnt through an
                # object collective: simulated, every rank is taken to hold this one's keys
                assert size <= real, (name, size, real)
            else:  # JSON: the same structure, other numbers in it (RNG states, checksums)
                assert abs(size - real) <= max(64, 0.02 * real), (name, size, real)
    if layout in NOT_MEASURED or not (layout in BOTH_ENDS or layout in ALIKE):
        return
    whole, total = document["checkpoint"], sum(written.values())
    assert whole["files"] == len(written), sorted(written)  # the manifest included
    assert abs(whole["bytes"] - total) <= (0.03 if layout in PIPELINE else 0.01) * total


LLAMA_8B_PARAMETERS = 8_030_261_248  # embedding, 32 layers, norm and untied head


@pytest.mark.distributed
@pytest.mark.extended
def test_a_llama_8b_shape_as_one_of_512_processes_holds_one_512th(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    flags = ["--num_machines", "64", "--main_process_ip", "10.0.0.1", *FSDP2, *LAYERS]
    sim = ["--simulate", "--simulate_ranks", "0", "--simulate_steps", "1"]
    result = run_launch(
        "simulate_llama8b.py",
        nprocs=512,
        launch_args=[*sim, "--simulate_json", str(report), *flags],
        timeout=600,
    )
    assert_ok(result)
    (rank,) = json.loads(report.read_text())["ranks"]
    assert (rank["rank"], rank["world_size"], rank["steps"]) == (0, 512, 1)
    share = LLAMA_8B_PARAMETERS * 4 / 512  # fp32
    # rank 0 holds the rounded-up row count of every parameter (FSDP2 pads the last ranks)
    assert share <= rank["state_bytes"]["parameters"] <= share * 1.005
    assert rank["state_bytes"]["optimizer_state"] == 2 * rank["state_bytes"]["parameters"]
    assert set(rank["collectives_per_step"][0]) >= {"all_gather", "reduce_scatter"}


LLAMA_8B_EMBEDDING = 128256 * 4096  # the head is as large
LLAMA_8B_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


@pytest.mark.distributed
@pytest.mark.extended
@pytest.mark.parametrize("machines", [64, 512])
def test_a_llama_8b_shape_in_3d_as_the_first_and_last_process(
    tmp_path: Path, machines: int
) -> None:
    """pp 4 x dp_shard (machines / 4) x tp 8 on machines x 8 processes (512, and 4,096):
    the first and the last stage each hold their 8 layers and their rows of the embedding
    or the head, over dp_shard x 8, and send on every dimension."""
    world, dp_shard = machines * 8, machines // 4
    report = tmp_path / "report.json"
    flags = ["--num_machines", str(machines), "--main_process_ip", "10.0.0.1", *FSDP2, *LAYERS]
    flags += ["--parallelism_config_tp_size", "8", "--parallelism_config_pp_size", "4"]
    sim = ["--simulate", "--simulate_steps", "1", "--simulate_json", str(report)]
    result = run_launch(
        "simulate_llama8b.py",
        nprocs=world,
        args=["--batch", "4"],
        launch_args=[*sim, *flags],
        timeout=600,
    )
    assert_ok(result)
    assert f"layout pp=4 x dp_shard={dp_shard} x tp=8" in result.stdout, result.stdout
    first, last = json.loads(report.read_text())["ranks"]
    assert (first["rank"], last["rank"]) == (0, world - 1)
    # FSDP2 cuts a tp shard's 16,032 vocabulary rows as torch.chunk does: the first dp rank
    # holds a full chunk, the last what is left (30 rows of 126 at dp_shard 128)
    rows, chunk = 128256 // 8, -(-(128256 // 8) // dp_shard)
    ends = {
        0: chunk * 4096,
        dp_shard - 1: (rows - (dp_shard - 1) * chunk) * 4096 + 4096 // dp_shard,
    }
    for rank, dp_rank in ((first, 0), (last, dp_shard - 1)):
        share = (ends[dp_rank] + 8 * LLAMA_8B_LAYER / (dp_shard * 8)) * 4  # fp32
        assert share <= rank["state_bytes"]["parameters"] <= share * 1.005, rank["state_bytes"]
        groups = {
            group for entry in rank["collectives_per_step"][0].values() for group in entry["groups"]
        }
        assert {"pp", "dp_shard", "tp"} <= groups
    # the last stage sends the loss (one fp32) to the 3 stages before it, on a group of its own
    assert last["collectives_per_step"][0]["send"]["groups"]["pp_loss"] == {"count": 3, "bytes": 12}
