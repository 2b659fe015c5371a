"""Exact resume under DeepSpeed, for tests/distributed/test_deepspeed_resume.py.

The ZeRO stage and the number of processes come from the launch. Training: 2 epochs of 5
shuffled batches of 4 per process, gradient accumulation 2 (windows 2, 2, 1), clipping and
AdamW with a StepLR, all through the plain loop.

full:    train uninterrupted; save_state after batch 3 of epoch 0 (mid-epoch, a window just
         closed) to ``mid``, and at the end of epoch 0 to ``epoch``; also try a save inside a
         window (refused); write the final parameters to ``full.safetensors``.
resume:  a new launch: a checkpoint holding a crafted pickle is refused and the pickle's code
         never runs; then load ``mid`` and train to the end; write ``resume.safetensors``.
one:     one process loads ``epoch`` (saved by two): parameters and optimizer state are the
         saved ones, resharded to one process.

``--once_per_step``: the scheduler advances once per optimizer step, not once per process, so
a run on another number of processes follows the same schedule.
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from overdrive import DataLoaderConfiguration, SchedulerKwargs
from overdrive.accelerator import Accelerator
from overdrive.checkpoint import CheckpointError, UnsafeCheckpointError
from overdrive.checkpoint.serialization import load_tree

MAX_NORM = 0.05


def build(acc: Accelerator) -> tuple:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
    model.append(nn.Linear(16, 1))
    g = torch.Generator().manual_seed(1)
    n = 2 * 4 * 5
    ds = TensorDataset(torch.randn(n, 5, generator=g), torch.randn(n, 1, generator=g))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    loader = DataLoader(ds, batch_size=4 * 2 // acc.num_processes, shuffle=True)
    return acc.prepare(model, opt, loader, sched)


def step(acc: Accelerator, model, opt, sched, x, y) -> None:
    with acc.accumulate(model):
        acc.backward(F.mse_loss(model(x), y))
        if acc.sync_gradients:
            acc.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        sched.step()
        opt.zero_grad()


def record(acc: Accelerator, model, path: Path) -> None:
    state = acc.get_state_dict(model)
    if acc.is_main_process:
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    acc.wait_for_everyone()


class Payload:
    """Unpickling this creates a marker file: proof that a pickle's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (self.marker,))


def crafted(acc: Accelerator, source: Path, out: Path) -> Path:
    """A copy of ``source`` whose optimizer state is a pickle that would run code."""
    target = out / "crafted"
    if acc.is_main_process:
        shutil.copytree(source, target)
        for suffix in (".json", ".safetensors"):
            (target / f"optimizer_0{suffix}").unlink(missing_ok=True)
        with open(target / "optimizer_0.pt", "wb") as f:
            pickle.dump(Payload(out / "PICKLE_RAN"), f)
        # An attacker edits the manifest too, so the checksums do not stop the load first.
        manifest_path = target / "overdrive_checkpoint.json"
        manifest = json.loads(manifest_path.read_text())
        for suffix in (".json", ".safetensors"):
            manifest.get("files", {}).pop(f"optimizer_0{suffix}", None)
        manifest_path.write_text(json.dumps(manifest))
    acc.wait_for_everyone()
    return target


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--phase", choices=("full", "resume", "one"), required=True)
    parser.add_argument(
        "--once_per_step",
        action="store_true",
        help="the scheduler advances once per optimizer step (the default: once per process)",
    )
    args = parser.parse_args()
    out = Path(args.out)
    once = SchedulerKwargs(once_per_optimizer_step=True)
    exact = DataLoaderConfiguration(exact_resume=True)  # overdrive's exact resume
    acc = Accelerator(
        kwargs_handlers=[once] if args.once_per_step else None, dataloader_config=exact
    )
    model, opt, loader, sched = build(acc)
    facts: dict = {"phase": args.phase, "rank": acc.process_index}
    if args.phase == "one":
        acc.load_state(out / "epoch")
        saved_model = load_tree(out / "epoch", "model_0", what="model")
        saved_opt = load_tree(out / "epoch", "optimizer_0", what="optimizer")
        now_model = acc.get_state_dict(model)
        now_opt = acc.strategy.state_dict(opt)
        facts["model_equal"] = all(torch.equal(now_model[k], v) for k, v in saved_model.items())
        facts["masters_equal"] = all(
            torch.equal(now_opt["masters"][k], v) for k, v in saved_opt["masters"].items()
        )
        facts["state_equal"] = all(
            torch.equal(now_opt["state"][k][s], v)
            for k, states in saved_opt["state"].items()
            for s, v in states.items()
        )
        facts["steps"] = [s["value"] for s in now_opt["steps"] if s]
        facts["lr"] = opt.param_groups[0]["lr"]
        print("RESULT " + json.dumps(facts), flush=True)
        return
    if args.phase == "resume":
        target = crafted(acc, out / "mid", out)
        try:
            acc.load_state(target)
        except UnsafeCheckpointError as exc:
            facts["refused"] = "pickle" in str(exc)
        facts["pickle_ran"] = (out / "PICKLE_RAN").exists()
        acc.load_state(out / "mid")
    for _ in range(loader.epoch, 2):
        for batch, (x, y) in enumerate(loader):
            step(acc, model, opt, sched, x, y)
            if args.phase == "full" and loader.epoch == 0 and batch == 2:
                try:  # batch 2 opens the second window: saving now is refused
                    acc.save_state(out / "inside")
                except CheckpointError as exc:
                    facts["inside_refused"] = "accumulation window" in str(exc)
            if args.phase == "full" and loader.epoch == 0 and batch == 3:
                acc.save_state(out / "mid")
        if args.phase == "full" and loader.epoch == 1:  # epoch 0 just ended
            acc.save_state(out / "epoch")
    record(acc, model, out / f"{args.phase}.safetensors")
    facts["lr"] = opt.param_groups[0]["lr"]
    print("RESULT " + json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
