"""``--simulate_cost FILE``: the cost file's checks, the wire bytes of each collective, and a
simulated DDP rank's estimated step time: its FLOPs counted on the fake tensors, its all-reduce
over the bandwidth of a group spanning machines (docs/simulate.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.errors import ConfigError
from overdrive.simulate.cost import estimate, load_cost, wire_bytes
from tests.helpers.simulate_script import TRAIN_SCRIPT, run_overdrive_ok

GOOD = "flops_per_second: 1.0e+9\nbandwidth:\n  intra_node: 4.0e+6\n  inter_node: 1.0e+6\n"


def _cost(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cost.yaml"
    path.write_text(text)
    return path


def test_a_good_file(tmp_path: Path) -> None:
    cost = load_cost(str(_cost(tmp_path, GOOD)))
    assert cost.flops_per_second == 1e9
    assert cost.bandwidth == {"intra_node": 4e6, "inter_node": 1e6}
    json_cost = load_cost(str(_cost(tmp_path, '{"flops_per_second": 5, "bandwidth": {"tp": 2}}')))
    assert json_cost.bandwidth == {"tp": 2.0}


@pytest.mark.parametrize(
    ("text", "names", "fix"),
    [
        ("flops_per_second: 1\nbandwith: {tp: 1}\n", "unknown key 'bandwith'", "flops_per_second and bandwidth only"),
        ("bandwidth: {tp: 1}\n", "flops_per_second is missing", "add it"),
        ("flops_per_second: 1\n", "bandwidth is missing", "add it"),
        ("flops_per_second: fast\nbandwidth: {tp: 1}\n", "flops_per_second is 'fast', not a positive number", "as a number"),
        ("flops_per_second: 1\nbandwidth: {tp: -3}\n", "bandwidth.tp is -3, not a positive number", "as a number"),
        ("flops_per_second: 1\nbandwidth: {nvlink: 1}\n", "unknown key bandwidth.nvlink", "intra_node, inter_node or a group name"),
        ("flops_per_second: 1\nbandwidth: 5\n", "bandwidth is 5, not a mapping", "bandwidth: {intra_node"),
        ("- 1\n", "the cost file holds no mapping", "flops_per_second: 4.0e+14"),
    ],
)  # fmt: skip
def test_a_wrong_or_missing_key_is_named_with_the_file_and_the_fix(
    tmp_path: Path, text: str, names: str, fix: str
) -> None:
    path = _cost(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_cost(str(path))
    message = str(raised.value)
    assert message.startswith(f"{path}: {names}"), message
    assert "fix:" in message and fix in message, message


def test_the_cli_refuses_a_bad_cost_file_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    cost = _cost(tmp_path, "flops_per_second: 1\n")
    argv = ["launch", "--simulate", "--simulate_cost", str(cost), "--cpu", "--num_processes", "2"]
    assert main([*argv, str(script)]) == 2
    err = capsys.readouterr().err
    assert f"{cost}: bandwidth is missing" in err and "Traceback" not in err
    assert (
        main([*argv[:2], "--simulate_cost", str(tmp_path / "none.yaml"), *argv[4:], str(script)])
        == 2
    )
    assert "none.yaml: cannot read it" in capsys.readouterr().err


def test_wire_bytes_by_the_ring_counts() -> None:
    assert wire_bytes("all_gather", 100, 4) == 300  # its input is one shard of four
    assert wire_bytes("reduce_scatter", 400, 4) == 300
    assert wire_bytes("all_reduce", 400, 4) == 600
    assert wire_bytes("broadcast", 400, 4) == 400
    assert wire_bytes("send", 400, 1) == 400
    assert wire_bytes("all_reduce", 400, 1) == 0  # a group of one sends nothing


def test_a_group_without_a_bandwidth_is_named(tmp_path: Path) -> None:
    cost = load_cost(str(_cost(tmp_path, "flops_per_second: 1\nbandwidth: {intra_node: 1}\n")))
    window = {
        "all_reduce": {"count": 1, "bytes": 8, "groups": {"dp_shard": {"count": 1, "bytes": 8}}}
    }
    report = {"world_size": 16, "collectives_per_step": [window], "flops_per_step": [4],
              "groups": {"dp_shard": {"size": 16, "machines": 2}}}  # fmt: skip
    with pytest.raises(ConfigError, match="no bandwidth for the group 'dp_shard'") as raised:
        estimate(cost, report)
    assert "fix: add bandwidth.dp_shard or bandwidth.inter_node" in str(raised.value)


SCRIPT = TRAIN_SCRIPT
GPU_CONFIG = (
    "distributed_type: MULTI_GPU\nnum_machines: 2\nnum_processes: 16\n"
    "main_process_ip: 10.0.0.1\nmachine_rank: 0\n"
)


def test_a_simulated_ddp_rank_gets_its_step_time(tmp_path: Path) -> None:
    """DDP on 2 machines x 8: the last rank's second step computes 2 x 16 x (64 x 256 +
    256 x 8) FLOPs forward, as many for the weights' gradients and 2 x 16 x 256 x 8 for the
    hidden layer's input gradient; its one all-reduce of every gradient spans both machines
    (inter_node: 1 MB/s) and sends 2 x 15/16 of the bytes."""
    script, config, report = tmp_path / "train.py", tmp_path / "gpu.yaml", tmp_path / "r.json"
    script.write_text(SCRIPT)
    config.write_text(GPU_CONFIG)
    cost = _cost(tmp_path, GOOD)
    argv = ["config", "validate", "--simulate", "--simulate_ranks", "-1"]
    argv += ["--simulate_cost", str(cost), "--simulate_json", str(report), str(config)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    done = run_overdrive_ok([*argv, str(script)], env)
    (rank,) = json.loads(report.read_text())["ranks"]
    flops = 2 * (2 * 16 * (64 * 256 + 256 * 8)) + 2 * 16 * 256 * 8
    assert rank["flops_per_step"][1] == flops
    assert rank["groups"]["world"] == {"size": 16, "machines": 2}
    weights = (64 * 256 + 256 + 256 * 8 + 8) * 4
    time = rank["step_time"]
    assert time["step"] == 2 and time["flops"] == flops
    assert time["compute_s"] == pytest.approx(flops / 1e9)
    assert time["communication_s"] == {"world": pytest.approx(2 * weights * 15 / 16 / 1e6)}
    assert time["step_s"] == pytest.approx(time["compute_s"] + time["communication_s"]["world"])
    assert "estimated time of step 2: 0.1415 s" in done.stdout
