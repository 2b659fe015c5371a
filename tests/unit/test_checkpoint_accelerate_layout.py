"""Checkpoints cross both ways with Hugging Face Accelerate (its package from .compat/site):
``load_state`` reads its default ``save_state`` layout without unpickling code and without
a script change, and ``checkpoint_format: accelerate`` writes a checkpoint its
``load_state`` reads. Model, optimizer, scheduler, registered object and random streams
are compared exactly."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from overdrive import Accelerator, ProjectConfiguration
from overdrive.checkpoint.errors import UnsafeCheckpointError

REPO = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("OVERDRIVE_COMPAT_SITE", REPO / ".compat" / "site"))

# Runs under Hugging Face Accelerate: "save DIR SAFE" trains two steps and saves; "load DIR"
# loads into fresh objects. Either way it writes what it then holds to DIR/seen.pt.
SCRIPT = """\
import random, sys
import numpy as np, torch
from accelerate import Accelerator

class Counter:
    def __init__(self): self.n = 0
    def state_dict(self): return {"n": self.n}
    def load_state_dict(self, state): self.n = state["n"]

mode, folder = sys.argv[1], sys.argv[2]
acc = Accelerator(cpu=True)
torch.manual_seed(1 if mode == "load" else 0)
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
counter = Counter()
model, opt, sched = acc.prepare(model, opt, sched)
acc.register_for_checkpointing(counter)
if mode == "save":
    for _ in range(2):
        acc.backward(model(torch.randn(4, 3)).pow(2).sum())
        opt.step(); sched.step(); opt.zero_grad()
    counter.n = 7
    random.seed(5); np.random.seed(6); torch.manual_seed(7)
    acc.save_state(folder + "/ckpt", safe_serialization=sys.argv[3] == "1")
else:
    acc.load_state(folder + "/ckpt")
seen = {
    "model": {k: v.clone() for k, v in model.state_dict().items()},
    "optimizer": opt.optimizer.state_dict(),
    "scheduler": sched.scheduler.state_dict(),
    "counter": counter.n,
    "draws": [random.random(), float(np.random.rand()), torch.rand(3)],
}
torch.save(seen, folder + "/seen.pt")
"""


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.n = state["n"]


def _accelerate(tmp_path: Path, *args: str) -> dict[str, Any]:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(PYTHONPATH=str(SITE), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, str(script), *args, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(tmp_path / "seen.pt", weights_only=False)


def _ours(project: ProjectConfiguration | None = None) -> tuple[Accelerator, Any, Any, Any, Any]:
    acc = Accelerator(cpu=True, project_config=project)
    torch.manual_seed(3)  # weights unlike the saved ones
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    model, opt, sched = acc.prepare(model, opt, sched)
    counter = Counter()
    acc.register_for_checkpointing(counter)
    return acc, model, opt, sched, counter


def _seen(model: Any, opt: Any, sched: Any, counter: Counter) -> dict[str, Any]:
    return {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "optimizer": opt.optimizer.state_dict(),
        "scheduler": sched.scheduler.state_dict(),
        "counter": counter.n,
        "draws": [random.random(), float(np.random.rand()), torch.rand(3)],
    }


def _assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


@pytest.mark.slow
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_a_checkpoint_accelerate_wrote_loads_without_unpickling_code(
    tmp_path: Path, safe: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = _accelerate(tmp_path, "save", str(tmp_path), "1" if safe else "0")
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert ("model.safetensors" if safe else "pytorch_model.bin") in names
    assert {"optimizer.bin", "scheduler.bin", "random_states_0.pkl"} <= names
    calls: list[object] = []
    real_load = torch.load

    def watch(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", watch)
    acc, model, opt, sched, counter = _ours()
    acc.load_state(tmp_path / "ckpt")  # no allow_unsafe_pickle
    assert calls and all(flag is True for flag in calls)  # torch.load(weights_only=True) only
    _assert_same(_seen(model, opt, sched, counter), theirs)


def test_a_file_that_names_code_is_refused_with_the_fix(tmp_path: Path) -> None:
    acc, model, opt, sched, _ = _ours()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save(model.state_dict(), ckpt / "pytorch_model.bin")
    torch.save(opt.optimizer.state_dict(), ckpt / "optimizer.bin")
    torch.save(sched.scheduler.state_dict(), ckpt / "scheduler.bin")
    torch.save({"n": Path("x")}, ckpt / "custom_checkpoint_0.pkl")  # a class, not data
    with pytest.raises(
        UnsafeCheckpointError, match=r"(?s)custom object 0: .*names pathlib.*allow_unsafe_pickle"
    ):
        acc.load_state(ckpt)


@pytest.mark.slow
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_checkpoint_format_accelerate_is_read_by_accelerate(tmp_path: Path, safe: bool) -> None:
    acc, model, opt, sched, counter = _ours(ProjectConfiguration(checkpoint_format="accelerate"))
    for _ in range(2):
        acc.backward(model(torch.randn(4, 3)).pow(2).sum())
        opt.step()
        sched.step()
        opt.zero_grad()
    counter.n = 9
    random.seed(15)
    np.random.seed(16)
    torch.manual_seed(17)
    acc.save_state(tmp_path / "ckpt", safe_serialization=safe)
    ours = _seen(model, opt, sched, counter)
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    model_file = "model.safetensors" if safe else "pytorch_model.bin"
    assert names == {model_file, "optimizer.bin", "scheduler.bin", "random_states_0.pkl",
                     "custom_checkpoint_0.pkl"}  # fmt: skip
    theirs = _accelerate(tmp_path, "load")
    _assert_same(ours, theirs)


def test_prepared_loaders_are_left_as_accelerate_leaves_them(tmp_path: Path) -> None:
    """A prepared dataloader is no reason to refuse Accelerate's checkpoint (its load_state
    leaves loaders alone); its loader-state file, not read, is named in a warning."""
    acc, model, opt, sched, counter = _ours()
    loader = acc.prepare(torch.utils.data.DataLoader(torch.arange(8.0), batch_size=2))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save(model.state_dict(), ckpt / "pytorch_model.bin")
    torch.save(opt.optimizer.state_dict(), ckpt / "optimizer.bin")
    torch.save(sched.scheduler.state_dict(), ckpt / "scheduler.bin")
    torch.save({"n": 4}, ckpt / "custom_checkpoint_0.pkl")
    torch.save({"step": 0}, ckpt / "random_states_0.pkl")
    acc.load_state(ckpt)
    assert counter.n == 4 and [b.tolist() for b in loader][0] == [0.0, 1.0]
    torch.save({"_num_yielded": 1}, ckpt / "dl_state_dict.bin")
    with pytest.warns(UserWarning, match=r"dl_state_dict.bin .* is not read"):
        acc.load_state(ckpt)
