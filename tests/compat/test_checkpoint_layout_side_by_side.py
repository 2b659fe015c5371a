"""Checkpoints cross with Hugging Face Accelerate on 2 DDP CPU processes, both ways: its
``save_state`` is read by overdrive's ``load_state``, and overdrive's ``checkpoint_format:
accelerate`` by its ``load_state``. The same script (importing either package) saves after
two steps or loads into fresh objects, then prints each process's weights, momentum buffers,
scheduler count and next random draws; the loading run must print what the saving run did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.harness import REPO, environment, free_port
from tests.compat.test_conformance import SITE

SCRIPT = """\
import os, random, sys
import torch

if os.environ.get("CHECKPOINT_ENGINE") == "overdrive":
    from overdrive import Accelerator, ProjectConfiguration
    kwargs = {"project_config": ProjectConfiguration(checkpoint_format="accelerate")}
else:
    from accelerate import Accelerator
    kwargs = {}
mode, folder = sys.argv[1], sys.argv[2]
acc = Accelerator(**kwargs)
torch.manual_seed(1 if mode == "load" else 0)
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
model, opt, sched = acc.prepare(model, opt, sched)
if mode == "save":
    for _ in range(2):
        acc.backward(model(torch.randn(4, 3)).pow(2).sum())
        opt.step(); sched.step(); opt.zero_grad()
    random.seed(5 + acc.process_index); torch.manual_seed(7 + acc.process_index)
    acc.save_state(folder)
else:
    acc.load_state(folder)
weights = [v.tolist() for v in acc.unwrap_model(model).state_dict().values()]
momentum = [s["momentum_buffer"].tolist() for s in opt.optimizer.state_dict()["state"].values()]
seen = (acc.process_index, weights, momentum, sched.scheduler.last_epoch, repr(random.random()),
        torch.rand(2).tolist())
# one write per line: Accelerate's launcher hands both processes the same unprefixed stdout,
# and print's separate writes of each part interleaved there ("SEENSEEN 0 ...")
sys.stdout.write("SEEN " + " ".join(map(str, seen)) + "\\n")
sys.stdout.flush()
"""


def _run(engine: str, mode: str, tmp: Path) -> list[str]:
    script = tmp / "ckpt.py"
    script.write_text(SCRIPT)
    count = ["--num_processes", "2", "--main_process_port", str(free_port())]
    if engine == "accelerate":
        env = environment("torchrun", SITE.resolve(), call_timeout=300)
        start = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", *count]
    else:
        env = environment("overdrive", None, call_timeout=300)
        env["CHECKPOINT_ENGINE"] = "overdrive"
        start = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--no_rank_prefix", *count]
    done = subprocess.run(
        [*start, str(script), mode, str(tmp / "ckpt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, f"{engine}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return sorted(line for line in done.stdout.splitlines() if line.startswith("SEEN "))


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(
    ("saver", "loader"), [("accelerate", "overdrive"), ("overdrive", "accelerate")]
)
def test_checkpoints_cross_on_two_processes(tmp_path: Path, saver: str, loader: str) -> None:
    saved = _run(saver, "save", tmp_path)
    assert len(saved) == 2 and saved[0] != saved[1]  # each process its own random streams
    assert _run(loader, "load", tmp_path) == saved
