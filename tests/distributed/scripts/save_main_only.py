"""save_state the way diffusers' scripts call it, then resume.

    save_main_only.py OUT MODE [BACKEND]

MODE ``main``: a few DDP steps, ``save_state`` inside ``if accelerator.is_main_process:``,
more steps (the others must not wait), then ``load_state`` on every process and a check
that the model is the saved one. ``every``: the same with ``save_state`` on every process.
BACKEND ``fsdp`` runs FSDP2 (sharded state: the main-only call must be named, not hang).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from overdrive import Accelerator, FullyShardedDataParallelPlugin, ProjectConfiguration
from overdrive.state import is_initialized

out, mode = Path(sys.argv[1]), sys.argv[2]
backend = sys.argv[3] if len(sys.argv) > 3 else "ddp"
plugin = FullyShardedDataParallelPlugin(fsdp_version=2) if backend == "fsdp" else None
# diffusers' other habits: Path objects for the directories, trackers started on the main
# process only, log() called on every process.
project = ProjectConfiguration(project_dir=out, logging_dir=out / "logs")
accelerator = Accelerator(fsdp_plugin=plugin, log_with="jsonl", project_config=project)
assert is_initialized()
if accelerator.is_main_process:
    accelerator.init_trackers("run")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)


def step() -> None:
    x = torch.randn(4, 4)
    loss = model(x).pow(2).mean()
    accelerator.log({"loss": loss.item()})
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


for _ in range(3):
    step()
saved = {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}
if mode == "every" or accelerator.is_main_process:
    accelerator.save_state(str(out / "ckpt"))
for _ in range(3):  # the other processes went on at once: no wait for the save
    step()
before = torch.get_rng_state()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    accelerator.load_state(str(out / "ckpt"))
rng_kept = torch.equal(before, torch.get_rng_state())
now = accelerator.get_state_dict(model)
same = all(torch.equal(saved[k], now[k]) for k in saved) if accelerator.is_main_process else True
rank = accelerator.process_index
print(
    "RESULT "
    + json.dumps(
        {
            "rank": rank,
            "same": same,
            "rng_kept": rng_kept,
            "rank_dirs": sorted(p.name for p in (out / "ckpt").glob("rank_*")),
            "alone_warning": any("main process alone" in str(w.message) for w in caught),
            "logged": sum(len(f.read_text().splitlines()) for f in (out / "logs").rglob("*.jsonl")),
        }
    )
)
