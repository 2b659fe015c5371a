"""`overdrive launch --simulate` and `python -m overdrive.run --simulate`: which ranks they
run, that they refuse exactly what the real launch refuses before anything runs, and one small
DDP world simulated from a config file (docs/simulate.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.errors import LaunchError
from overdrive.simulate.ranks import choose_ranks
from tests.helpers.simulate_script import (
    TRAIN_SCRIPT,
    assert_simulate_refuses_as_launch,
    run_overdrive_ok,
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(__import__("os").environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_")):
            monkeypatch.delenv(name)


def test_the_first_and_the_last_rank_by_default() -> None:
    assert choose_ranks(None, 512) == [0, 511]
    assert choose_ranks(None, 1) == [0]  # the first is the last: simulated once
    assert choose_ranks("3, -2,3", 8) == [3, 6]


@pytest.mark.parametrize("spec", ["8", "-9", "last", ""])
def test_a_rank_outside_the_world_is_refused(spec: str) -> None:
    with pytest.raises(LaunchError, match="is not a rank of this world of 8 process"):
        choose_ranks(spec, 8)


def test_the_launchs_own_refusal_word_for_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--cpu", "--num_processes", "3", "--parallelism_config_tp_size", "2"]
    refused = assert_simulate_refuses_as_launch(capsys, tmp_path, flags)
    assert "does not divide the 3 processes" in refused


def test_a_simulated_rank_is_checked_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    argv = ["launch", "--simulate", "--simulate_ranks", "4", "--cpu", "--num_processes", "4"]
    assert main([*argv, str(script)]) == 2
    err = capsys.readouterr().err
    assert "--simulate_ranks '4': '4' is not a rank of this world of 4" in err
    assert "must not run" not in err


@pytest.mark.parametrize("where", ["flag", "json"])
def test_zero_offload_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """DeepSpeed's CPU Adam would crash a simulated rank: refused with the setting, where it
    came from and the fix, exit code 2, the script never started."""
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    argv = ["launch", "--simulate", "--cpu", "--num_processes", "2", "--use_deepspeed"]
    if where == "flag":
        argv += ["--zero_stage", "2", "--offload_optimizer_device", "cpu"]
    else:
        ds = tmp_path / "ds.json"
        zero = {"stage": 3, "offload_param": {"device": "cpu"}}
        ds.write_text(json.dumps({"zero_optimization": zero, "train_micro_batch_size_per_gpu": 1}))
        argv += ["--deepspeed_config_file", str(ds)]
    assert main([*argv, str(script)]) == 2
    err = capsys.readouterr().err
    assert "--simulate does not run DeepSpeed's ZeRO-Offload" in err
    if where == "flag":
        assert "offload_optimizer_device = cpu, from flag --offload_optimizer_device" in err
    else:
        assert "zero_optimization.offload_param.device = cpu, from" in err and "ds.json" in err
    assert "fix: simulate the same layout without offload" in err
    assert "must not run" not in err and "Traceback" not in err


SCRIPT = TRAIN_SCRIPT + 'print("the script finished")\n'
CONFIG = "distributed_type: MULTI_CPU\nnum_processes: 4\nuse_cpu: true\n"


def test_python_m_overdrive_run_simulates_the_world_of_the_config_file(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "cache" / "overdrive").mkdir(parents=True)
    (tmp_path / "cache" / "overdrive" / "default_config.yaml").write_text(CONFIG)
    report = tmp_path / "report.json"
    argv = ["--simulate", "--simulate_ranks", "-1", "--simulate_json", str(report), str(script)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", *argv], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "rank 3 of 4: stopped after 2 optimizer step(s)" in done.stdout
    assert "the script finished" not in done.stdout
    (rank,) = json.loads(report.read_text())["ranks"]
    weights = (64 * 256 + 256 + 256 * 8 + 8) * 4  # fp32 bytes of the whole model
    assert rank["state_bytes"] == {
        "parameters": weights,
        "gradients": weights,
        "optimizer_state": 0,
    }
    # DDP: one bucket, all-reduced once per step (step 1 also broadcasts the weights)
    once = {"count": 1, "bytes": weights}
    assert rank["collectives_per_step"][1] == {"all_reduce": {**once, "groups": {"world": once}}}


CATCHING = """\
import torch
from overdrive import Accelerator

acc = Accelerator()
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
for _ in range(10):
    try:
        acc.backward(model(torch.randn(4, 8)).sum())
        opt.step()
        opt.zero_grad()
    except Exception as error:
        print("the script caught", type(error).__name__)
print("the script finished")
"""


def test_a_script_catching_exceptions_is_still_stopped(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CATCHING)
    argv = ["launch", "--simulate", "--simulate_ranks", "0", "--cpu", "--num_processes", "2"]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = run_overdrive_ok([*argv, str(script)], env)
    assert "rank 0 of 2: stopped after 2 optimizer step(s)" in done.stdout
    assert "the script" not in done.stdout


def test_overdrive_test_simulates_its_check_with_object_collectives(tmp_path: Path) -> None:
    # the sanity check gathers Python objects, answered from the rank's own under simulation
    argv = ["test", "--simulate", "--cpu", "--num_processes", "2"]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = run_overdrive_ok(argv, env)
    assert "rank 1 of 2: stopped after 2 optimizer step(s)" in done.stdout
    assert "passed" not in done.stderr  # a simulation checks no values: no verdict


GPU_CONFIG = (
    "distributed_type: MULTI_GPU\nnum_machines: 2\nnum_processes: 16\n"
    "main_process_ip: 10.0.0.1\nmachine_rank: 0\nmixed_precision: bf16\n"
)


def test_config_validate_simulates_a_gpu_file_on_this_cpu(tmp_path: Path) -> None:
    """The file's checks for the machine it describes, then the script as the last of its
    16 processes, on this machine's CPU (it has no GPU)."""
    script, config, report = tmp_path / "train.py", tmp_path / "gpu.yaml", tmp_path / "r.json"
    script.write_text(SCRIPT)
    config.write_text(GPU_CONFIG)
    argv = ["config", "validate", "--simulate", "--simulate_ranks", "-1"]
    argv += ["--simulate_json", str(report), str(config), str(script)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    done = run_overdrive_ok(argv, env)
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{config}: valid (6 settings set")
    assert "runs on GPUs, which this machine lacks: simulated on its CPU" in done.stdout
    assert "simulated 16 processes (2 machine(s) x 8), layout dp_replicate=16" in done.stdout
    assert "rank 15 of 16: stopped after 2 optimizer step(s)" in done.stdout
    (rank,) = json.loads(report.read_text())["ranks"]
    weights = (64 * 256 + 256 + 256 * 8 + 8) * 4
    once = {"count": 1, "bytes": weights}
    assert rank["collectives_per_step"][1] == {"all_reduce": {**once, "groups": {"world": once}}}


def test_config_validate_reads_a_script_only_with_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gpu.yaml"
    config.write_text(GPU_CONFIG)
    assert main(["config", "validate", str(config), "train.py"]) == 2
    assert (
        "config validate reads a script (train.py) only with --simulate" in capsys.readouterr().err
    )
    assert main(["config", "validate", "--simulate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "config validate --simulate needs the script to simulate" in err
    assert f"fix: overdrive config validate --simulate {config} train.py" in err
    assert main(["config", "validate", "--simulate_ranks", "0", str(config)]) == 2
    assert "config validate: --simulate_ranks without --simulate" in capsys.readouterr().err


ACCUMULATING = """\
import torch
from overdrive import Accelerator

acc = Accelerator(gradient_accumulation_steps=2)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
for _ in range(10):
    with acc.accumulate(model):
        acc.backward(model(torch.randn(16, 64)).sum())
        opt.step()
        opt.zero_grad()
"""


def test_a_simulated_rank_says_each_phase_of_each_step_once(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(ACCUMULATING)  # two forwards and backwards a step: said once each
    argv = ["launch", "--simulate", "--simulate_ranks", "0", "--cpu", "--num_processes", "2"]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = run_overdrive_ok([*argv, str(script)], env)
    said = [
        re.sub(r" \(\d+\.\d s\)$", "", line.split("overdrive: simulate: rank 0 of 2: ", 1)[1])
        for line in done.stderr.splitlines()
        if "overdrive: simulate: rank 0 of 2: " in line
    ]
    steps = [
        [f"step {n} of 2: forward", f"step {n} of 2: backward", f"step {n} of 2: optimizer step"]
        + [f"step {n} of 2 done"]
        for n in (1, 2)
    ]
    assert said[:9] == ["running the script up to its first forward", *steps[0], *steps[1]]
    # each phase line gives the seconds since the rank started
    assert re.search(r"step 2 of 2: backward \(\d+\.\d s\)\n", done.stderr)
