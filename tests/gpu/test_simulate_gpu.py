"""`overdrive launch --simulate --simulate_device cuda` against the same script run on a CUDA
GPU: the simulated allocated and reserved peaks of the steps against what
``torch.cuda.max_memory_allocated`` and ``torch.cuda.max_memory_reserved`` read there, within
10%. Each case also appends its numbers as a JSON line to ``$SIMULATE_GPU_RESULTS`` when set
(what bench/RESULTS.md records)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers.dist import REPO, clean_env
from tests.helpers.simulate_script import run_overdrive_ok

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SCRIPT = REPO / "tests" / "gpu" / "scripts" / "simulate_cuda_llama.py"
SHAPE = ["2048", "8", "4", "1024"]  # hidden, layers, batch, sequence: about 540M parameters
FSDP2 = ["--use_fsdp", "--fsdp_version", "2",
         "--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]  # fmt: skip
CASES = {
    "fp32_eager": ([], "eager"),
    "bf16_eager": (["--mixed_precision", "bf16"], "eager"),
    "bf16_sdpa": (["--mixed_precision", "bf16"], "sdpa"),
    "fsdp2_bf16_eager": ([*FSDP2, "--mixed_precision", "bf16"], "eager"),
    "fsdp2_bf16_checkpointed": (
        [*FSDP2, "--mixed_precision", "bf16", "--fsdp_activation_checkpointing", "true"],
        "eager",
    ),
    "fp8_eager": (["--mixed_precision", "fp8"], "eager"),
}


def _launch(flags: list[str]) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)  # clean_env hides the GPUs
    # this tree's overdrive, also where it runs uninstalled (make gpu: PYTHONPATH=src)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return run_overdrive_ok(["launch", "--num_processes", "1", *flags], env)


@pytest.mark.parametrize("case", list(CASES))
def test_simulated_cuda_peaks_match_the_gpu(tmp_path: Path, case: str) -> None:
    flags, attention = CASES[case]
    if case.startswith("fp8"):
        pytest.importorskip("torchao")
        if torch.cuda.get_device_capability() < (8, 9):
            pytest.skip("fp8 needs compute capability 8.9 or newer")
    args = [str(SCRIPT), attention, *SHAPE]
    real_run = _launch([*flags, *args])
    (line,) = [ln for ln in real_run.stdout.splitlines() if "REAL " in ln]
    real = json.loads(line.split("REAL ", 1)[1])
    report = tmp_path / "simulated.json"
    sim_flags = ["--simulate", "--simulate_device", "cuda", "--simulate_steps", "3",
                 "--simulate_json", str(report), "--cpu"]  # fmt: skip
    _launch([*sim_flags, *flags, *args])
    (rank,) = json.loads(report.read_text())["ranks"]
    simulated = {
        "steps_allocated": rank["peak_bytes"]["Total"],
        "steps_reserved": rank["reserved_bytes"]["steps"],
        "setup_allocated": rank["setup_peak_bytes"]["Total"],
        "setup_reserved": rank["reserved_bytes"]["setup"],
        "peak_moment": rank["peak_moment"],
    }
    row = {"case": case, "gpu": torch.cuda.get_device_name(), "real": real, "simulated": simulated}
    if os.environ.get("SIMULATE_GPU_RESULTS"):
        with open(os.environ["SIMULATE_GPU_RESULTS"], "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
    for key in ("steps_allocated", "steps_reserved"):
        assert abs(simulated[key] - real[key]) <= 0.10 * real[key], (key, row)
