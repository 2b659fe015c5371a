"""save_state(async_save=True): training goes on while the checkpoint is written.

Checks on every process: the call returns a Future; the checkpoint directory is either
absent or complete while the write is pending; training after the call does not leak into
the checkpoint (loading it restores the state from the moment of the call); a following
save and end_training wait for the pending one. Run with any backend flags.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_checks import make_model  # noqa: E402

from overdrive.accelerator import Accelerator  # noqa: E402
from overdrive.checkpoint.layout import MANIFEST  # noqa: E402


def step(acc: Accelerator, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    x = torch.randn(4, 5)
    acc.backward(F.mse_loss(model(x), x.sum(dim=1, keepdim=True)))
    opt.step()
    opt.zero_grad()


def main() -> None:
    out = Path(sys.argv[1])
    acc = Accelerator(cpu=True)
    torch.manual_seed(acc.process_index)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = acc.prepare(model, opt)
    for _ in range(3):
        step(acc, model, opt)
    at_save = {k: v.clone() for k, v in acc.get_state_dict(model).items()}
    pending = acc.save_state(str(out / "ckpt"), async_save=True)
    assert isinstance(pending, Future), type(pending)
    final = out / "ckpt"
    assert not final.exists() or (final / MANIFEST).is_file(), "a visible checkpoint is complete"
    for _ in range(3):  # training goes on and changes the parameters
        step(acc, model, opt)
    moved = {k: v.clone() for k, v in acc.get_state_dict(model).items()}
    path = pending.result()
    assert path == final and (final / MANIFEST).is_file()
    acc.load_state(str(final))
    restored = acc.get_state_dict(model)
    if acc.is_main_process:
        assert any(not torch.equal(moved[k], at_save[k]) for k in at_save), "training moved"
        assert all(torch.equal(restored[k], at_save[k]) for k in at_save), "later steps leaked"
    second = acc.save_state(str(out / "ckpt2"), async_save=True)
    acc.save_state(str(out / "ckpt3"))  # waits for ckpt2 first
    assert second.done() and (out / "ckpt2" / MANIFEST).is_file()
    acc.save_state(str(out / "ckpt4"), async_save=True)
    acc.end_training()  # waits for ckpt4
    assert (out / "ckpt4" / MANIFEST).is_file()
    acc.print("ASYNC SAVE OK")


if __name__ == "__main__":
    main()
