"""fp8 under ``--simulate``: refused as a real CPU launch refuses it, word for word, when the
simulated device is this CPU; simulated as on a GPU with float8 matrix products (torchao's
``Float8Linear`` on fake tensors) with ``--simulate_device cuda``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.env import forget_launcher
from tests.helpers.simulate_script import TINY_LLAMA_SCRIPT, assert_simulate_refuses_as_launch

pytest.importorskip("torchao")
pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_fp8_on_a_simulated_cpu_is_refused_as_the_real_launch_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--cpu", "--num_processes", "2", "--mixed_precision", "fp8"]
    refused = assert_simulate_refuses_as_launch(
        capsys, tmp_path, flags, ["--simulate_device", "cpu"]
    )
    assert "mixed_precision='fp8' (from flag --mixed_precision) needs a CUDA GPU" in refused


def _simulated(tmp_path: Path, precision: str) -> tuple[str, dict]:
    script = tmp_path / f"train_{precision}.py"
    script.write_text(TINY_LLAMA_SCRIPT)
    report = tmp_path / f"{precision}.json"
    launch = [sys.executable, "-m", "overdrive.cli.main", "launch", "--simulate", "--cpu"]
    launch += ["--simulate_device", "cuda", "--simulate_ranks", "0", "--simulate_steps", "2"]
    launch += ["--simulate_json", str(report), "--num_processes", "2", "--use_fsdp"]
    launch += ["--fsdp_version", "2", "--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]
    launch += ["--mixed_precision", precision, str(script)]
    result = subprocess.run(launch, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (rank,) = json.loads(report.read_text())["ranks"]
    return result.stdout, rank


def test_fp8_on_a_simulated_gpu_runs_torchaos_float8_linears_and_sends_what_bf16_does(
    tmp_path: Path,
) -> None:
    fp8_out, fp8 = _simulated(tmp_path, "fp8")
    bf16_out, bf16 = _simulated(tmp_path, "bf16")
    assert "linear: Float8Linear" in fp8_out and "linear: Linear" in bf16_out
    assert fp8["steps"] == 2 == bf16["steps"]
    # the float8 casts of each converted linear's weight and input are held besides bf16's
    assert fp8["peak_bytes"]["Total"] > bf16["peak_bytes"]["Total"]
    # FSDP2 makes the same collectives with the same bytes: it gathers bf16 parameters under
    # fp8 as under bf16, as Hugging Face Accelerate's FSDP plugin does (torchao's float8
    # all-gather is off by default)
    assert _sent(fp8) == _sent(bf16)


def _sent(rank: dict) -> dict[str, tuple[int, int]]:
    return {
        kind: (entry["count"], entry["bytes"])
        for kind, entry in rank["collectives_per_step"][-1].items()
    }
