"""save_state made by the main process alone at one step and by every process at another.

    save_positions.py OUT MODE

A small DDP loop (model, optimizer, dataloader) on 2 processes; each process seeds its own
RNG differently, so a process resumed from another's state draws other numbers. MODE:

``own_dirs``: at step 2 every process saves into its own ``tempfile.TemporaryDirectory()``
and loads it (Hugging Face Accelerate's ``test_stateful_dataloader_save_state`` pattern).
``auto`` / ``named``: the main process saves alone at step 2 (automatic naming, or into
``OUT/latest``), every process saves at step 4, then each checkpoint is loaded.
``rotate``: ``total_limit=1``; the main process saves twice at step 2 and then lets process 1
call its two saves, after the first checkpoint was rotated away.
``killed``: the main process saves alone; process 1 then saves and is SIGKILLed while adding
its state to the committed checkpoint. ``reload`` (one plain process, afterwards): loads the
newest checkpoint, which must no longer hold what the killed process left.

Each process prints one ``RESULT`` line: what save_state returned, the rank directories of
each checkpoint, whether its RNG stream after a load is the one it had at the save, and
whether load_state warned that its state was absent.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import overdrive.checkpoint.save as save_module
from overdrive import Accelerator, InitProcessGroupKwargs, ProjectConfiguration

out, mode = Path(sys.argv[1]), sys.argv[2]
project = ProjectConfiguration(
    project_dir=str(out / "project"),
    automatic_checkpoint_naming=mode in ("auto", "rotate", "killed", "reload"),
    total_limit=1 if mode == "rotate" else None,
)
# A process left waiting ends with an error in 30 s instead of the default 30 minutes.
accelerator = Accelerator(
    project_config=project, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=30))]
)
rank = accelerator.process_index
store = dist.distributed_c10d._get_default_store() if dist.is_initialized() else None
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
# a global batch of 8 samples also for the one-process reload (a mid-epoch resume needs it)
data = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8 // accelerator.num_processes)
model, optimizer, data = accelerator.prepare(model, optimizer, data)
torch.manual_seed(100 + rank)
batches = iter(data)


def step() -> None:
    (x,) = next(batches)
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def rank_dirs(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(("rank_", ".rank_")))


def load(path: str | None, saved: str | None) -> tuple[bool, bool]:
    """Load ``path``: (this process's RNG draws what it drew after the save that returned
    ``saved``, load_state warned that this process's state is absent)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator.load_state(path)
    same = torch.equal(torch.rand(3), marks[saved])
    return same, any("main process alone" in str(w.message) for w in caught)


marks: dict[str | None, torch.Tensor] = {}


def mark(path: str | None) -> None:
    """What this process's RNG draws next, right after a save (a load must draw it again)."""
    state = torch.get_rng_state()
    marks[path] = torch.rand(3)
    torch.set_rng_state(state)


result: dict[str, object] = {"rank": rank}
for _ in range(2):
    step()
if mode == "own_dirs":
    with tempfile.TemporaryDirectory() as own:
        saved = str(accelerator.save_state(own))
        mark(saved)
        result["own"] = own
        result["returned"] = saved
        step()
        result["same"], result["warned"] = load(own, saved)
        accelerator.wait_for_everyone()
elif mode in ("auto", "named"):
    target = None if mode == "auto" else str(out / "latest")
    if accelerator.is_main_process:
        first = str(accelerator.save_state(target))
        mark(first)
    step()
    step()
    second = str(accelerator.save_state(target))
    mark(second)
    result["returned"] = second
    accelerator.wait_for_everyone()
    root = out / "project" / "checkpoints" if mode == "auto" else out
    result["dirs"] = {p.name: rank_dirs(p) for p in sorted(root.iterdir()) if p.is_dir()}
    step()
    result["same"], result["warned"] = load(second, second)
    if mode == "auto":
        step()
        _, result["warned_first"] = load(str(root / "checkpoint_0"), second)
elif mode == "rotate":
    go = "test/rotate/go"
    if accelerator.is_main_process:
        result["main_returned"] = [str(accelerator.save_state()) for _ in range(2)]
        store.set(go, "1")
    else:
        store.wait([go])  # both of the main process's saves are committed and rotated
        result["returned"] = [str(accelerator.save_state()) for _ in range(2)]
    mark(None)
    accelerator.wait_for_everyone()
    root = out / "project" / "checkpoints"
    result["dirs"] = {p.name: rank_dirs(p) for p in sorted(root.iterdir()) if p.is_dir()}
    step()
    result["same"], result["warned"] = load(None, None)
elif mode == "killed":
    go = "test/killed/go"
    if accelerator.is_main_process:
        result["main_returned"] = str(accelerator.save_state())
        store.set(go, "1")
        print("RESULT " + json.dumps(result), flush=True)
        accelerator.wait_for_everyone()  # process 1 never comes: the launcher ends this one
    else:
        store.wait([go])

        def die(stage: str) -> None:
            if stage == "adding rank files":
                os.kill(os.getpid(), signal.SIGKILL)

        save_module._fault_point = die
        accelerator.save_state()
elif mode == "reload":  # one plain process, after ``killed``
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # saved by 2 processes, resumed by 1: said, expected
        accelerator.load_state()
    root = out / "project" / "checkpoints"
    result["dirs"] = {p.name: rank_dirs(p) for p in sorted(root.iterdir()) if p.is_dir()}
print("RESULT " + json.dumps(result), flush=True)
