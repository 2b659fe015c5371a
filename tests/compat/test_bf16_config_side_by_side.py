"""A config file's ``mixed_precision: bf16`` (TRL's shipped ``multi_gpu.yaml``) is applied where
Hugging Face Accelerate applies it: bf16 autocast around the prepared model's forward (on the
CPU too), fp32 outputs, nothing else. The same script's losses are bitwise equal under
Accelerate's launcher (torchrun's path with ACCELERATE_USE_CPU=1 on 2 processes, the way it
forms a gloo group on a CPU host) and ``overdrive launch --cpu``, on 1 and 2 processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.harness import REPO, environment, free_port
from tests.compat.test_conformance import SITE

CONFIG = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_GPU
downcast_bf16: 'no'
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: 'bf16'
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""

SCRIPT = """\
import torch
from torch import nn
from accelerate import Accelerator

acc = Accelerator()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(24, 16), torch.randn(24, 4))
loader = torch.utils.data.DataLoader(data, batch_size=4)
model, opt, loader = acc.prepare(model, opt, loader)
for i, (x, y) in enumerate(loader):
    if i == 3:
        break
    out = model(x)
    loss = nn.functional.mse_loss(out, y)
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
    print(f"LOSS {acc.process_index} {i} {acc.mixed_precision} {out.dtype} {loss.item()!r}")
"""


def _losses(engine: str, nprocs: int, tmp: Path) -> list[str]:
    (tmp / "multi_gpu.yaml").write_text(CONFIG)
    (tmp / "train.py").write_text(SCRIPT)
    count = ["--num_processes", str(nprocs), "--main_process_port", str(free_port())]
    if engine == "accelerate":
        env = environment("torchrun", SITE.resolve(), call_timeout=300)
        start = [sys.executable, "-m", "accelerate.commands.launch"]
    else:
        env = environment("overdrive", None, call_timeout=300)
        start = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--no_rank_prefix"]
    done = subprocess.run(
        [*start, "--config_file", str(tmp / "multi_gpu.yaml"), *count, str(tmp / "train.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, f"{engine}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    # two processes' prints may share a line of the captured output: take each record whole
    return sorted(re.findall(r"LOSS \d+ \d+ \S+ \S+ -?[\d.]+(?:e-?\d+)?", done.stdout))


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [1, 2])
def test_bf16_from_the_config_file_gives_accelerates_losses(tmp_path: Path, nprocs: int) -> None:
    theirs = _losses("accelerate", nprocs, tmp_path)
    ours = _losses("overdrive", nprocs, tmp_path)
    assert len(ours) == 3 * nprocs
    assert all(" bf16 torch.float32 " in line for line in ours)
    assert ours == theirs
