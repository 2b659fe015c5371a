"""``--simulate_device cuda``: each allocation sized as PyTorch's CUDA caching allocator hands
it out (rounded up to 512 bytes), the report saying so, and an unknown device refused by
name before anything runs (docs/simulate.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.simulate.device import allocation_bytes, cuda_block_bytes
from tests.helpers.env import forget_launcher
from tests.helpers.simulate_script import run_overdrive_ok


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.mark.parametrize(
    ("request_bytes", "block"),
    [(0, 0), (1, 512), (4, 512), (511, 512), (512, 512), (513, 1024), (4000, 4096),
     (1_200_000, 1_200_128), (1 << 30, 1 << 30)],
)  # fmt: skip
def test_cuda_rounds_each_request_up_to_512_bytes(request_bytes: int, block: int) -> None:
    assert cuda_block_bytes(request_bytes) == block
    assert allocation_bytes("cuda", request_bytes) == block
    assert allocation_bytes("cpu", request_bytes) == request_bytes


# Three tensors alive together, no model: the peak is their sum. fp32 sizes: 400, 4,000 and
# 1,200,000 bytes; as CUDA blocks: 512, 4,096 and 1,200,128.
ALLOCATING = """\
import torch
kept = [torch.empty(100), torch.empty(1000), torch.empty(300000), torch.empty(0)]
print("allocated", sum(t.nbytes for t in kept))
"""


def _simulate(tmp_path: Path, device: str) -> tuple[str, dict]:
    script = tmp_path / "allocate.py"
    script.write_text(ALLOCATING)
    report = tmp_path / f"{device}.json"
    argv = ["launch", "--simulate", "--simulate_device", device, "--simulate_json", str(report)]
    argv += ["--cpu", "--num_processes", "1", str(script)]
    done = run_overdrive_ok(argv, dict(os.environ))
    return done.stdout, json.loads(report.read_text())


def test_a_simulated_rank_sized_for_cuda_holds_the_rounded_blocks(tmp_path: Path) -> None:
    cpu_text, cpu = _simulate(tmp_path, "cpu")
    cuda_text, cuda = _simulate(tmp_path, "cuda")
    (cpu_rank,) = cpu["ranks"]
    (cuda_rank,) = cuda["ranks"]
    assert cpu_rank["peak_bytes"]["Total"] == 400 + 4_000 + 1_200_000
    assert cuda_rank["peak_bytes"]["Total"] == 512 + 4_096 + 1_200_128
    assert cuda_rank["device"] == "cuda" and cpu_rank["device"] == "cpu"
    # the two small blocks share a 2 MiB segment; 1,200,128 bytes split a 20 MiB one
    assert cuda_rank["reserved_bytes"] == {"setup": 0, "steps": 22 << 20}
    assert cpu_rank["reserved_bytes"] == {}
    assert cuda["device"]["name"] == "cuda" and "512 bytes" in cuda["device"]["memory"]
    assert "segments" in cuda["device"]["memory"]
    assert "memory sized for cuda (--simulate_device): PyTorch's CUDA caching" in cuda_text
    assert "memory sized for cpu (--simulate_device): each tensor's own bytes" in cpu_text
    assert "peak memory in the steps: 1.15 MiB" in cuda_text
    # no module ran: the peak is reached outside every one, and outside any backward
    assert cuda_rank["peak_moment"] == {"module": "Global", "phase": "forward"}
    assert (
        "peak memory in the steps: 1.15 MiB (Activation 1.15 MiB), reached in Global (forward)"
        in cuda_text
    )
    assert "CUDA's reserved peak (segments of its caching allocator): 0 B before" in cuda_text
    assert "22.00 MiB in the steps" in cuda_text and "reserved" not in cpu_text


REFUSED = "--simulate_device 'tpu' is not a device the simulation sizes memory for"


def test_an_unknown_device_is_refused_by_launch_and_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    argv = ["launch", "--simulate", "--simulate_device", "tpu", "--cpu", "--num_processes", "2"]
    assert main([*argv, str(script)]) == 2
    err = capsys.readouterr().err
    assert REFUSED in err and "fix: --simulate_device cuda" in err
    assert "Traceback" not in err and "must not run" not in err
    config = tmp_path / "ddp.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n")
    argv = ["config", "validate", "--simulate", "--simulate_device", "tpu", str(config)]
    assert main([*argv, str(script)]) == 2
    captured = capsys.readouterr()
    assert REFUSED in captured.err and "valid" not in captured.out


def test_an_unknown_device_is_refused_by_python_m_overdrive_run(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    argv = ["--simulate", "--simulate_device", "tpu", str(script)]
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert REFUSED in done.stderr and "must not run" not in done.stderr + done.stdout


def test_the_device_flag_needs_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "ddp.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n")
    assert main(["config", "validate", "--simulate_device", "cuda", str(config)]) == 2
    assert "--simulate_device without --simulate" in capsys.readouterr().err
