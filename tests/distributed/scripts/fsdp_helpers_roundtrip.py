"""Hugging Face Accelerate's FSDP helpers (save/load_fsdp_model, save/load_fsdp_optimizer), as
transformers' Trainer calls them, for tests/distributed/test_fsdp_helpers.py.

save:  train 2 AdamW steps (global batch 6, split between the processes), write the model and
       optimizer with save_fsdp_model / save_fsdp_optimizer into OUT/ckpt, train a 3rd step,
       dump the full parameters to OUT/after.pt.
load:  build the same model, load_fsdp_model / load_fsdp_optimizer from OUT/ckpt (possibly on
       another number of processes or state-dict type), train the 3rd step, dump the full
       parameters to OUT/loaded.pt. With ``--renamed`` the model has a layer under another
       name: the load must be refused naming it; prints ``REFUSED <message>``.
Run with FSDP settings (version, state dict type) as launch flags.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_checks import full_params, make_model  # noqa: E402

from overdrive.accelerator import Accelerator  # noqa: E402
from overdrive.checkpoint.errors import CheckpointError  # noqa: E402
from overdrive.utils import (  # noqa: E402
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)

GLOBAL_BATCH = 6


def step(acc: Accelerator, model: nn.Module, opt: torch.optim.Optimizer, i: int) -> None:
    g = torch.Generator().manual_seed(100 + i)
    x, y = torch.randn(GLOBAL_BATCH, 5, generator=g), torch.randn(GLOBAL_BATCH, 1, generator=g)
    mine = slice(acc.process_index * GLOBAL_BATCH // acc.num_processes, None)
    mine = slice(mine.start, mine.start + GLOBAL_BATCH // acc.num_processes)
    loss = nn.functional.mse_loss(model(x[mine]), y[mine])
    acc.backward(loss)
    opt.step()
    opt.zero_grad()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phase", choices=["save", "load"], required=True)
    parser.add_argument("--renamed", action="store_true")
    args = parser.parse_args()
    acc = Accelerator()
    net = make_model()
    if args.renamed:
        net.head = net.out  # the same layer under a second name, as a changed model would have
        del net.out
        net.forward = lambda x: net.head(_body(net, x))  # type: ignore[method-assign]
    model = acc.prepare(net)
    opt = acc.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    ckpt = args.out / "ckpt"
    if args.phase == "save":
        step(acc, model, opt, 0)
        step(acc, model, opt, 1)
        save_fsdp_model(acc.fsdp_plugin, acc, model, ckpt, adapter_only=True)  # as Trainer calls
        save_fsdp_optimizer(acc.fsdp_plugin, acc, opt, model, ckpt)
        step(acc, model, opt, 2)
        name = "after.pt"
    else:
        try:
            load_fsdp_model(acc.fsdp_plugin, acc, model, ckpt, adapter_only=True)
        except CheckpointError as exc:
            print(f"REFUSED {exc}", flush=True)
            return
        load_fsdp_optimizer(acc.fsdp_plugin, acc, opt, model, ckpt)
        step(acc, model, opt, 2)
        name = "loaded.pt"
    params = full_params(acc, model)
    if acc.is_main_process:
        torch.save(params, args.out / name)
    print(f"PHASE DONE {args.phase} world={acc.num_processes}", flush=True)


def _body(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h = net.inp(x)
    for block in net.blocks:
        h = block(h)
    return h


if __name__ == "__main__":
    main()
