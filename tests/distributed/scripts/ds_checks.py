"""DeepSpeed on W CPU processes, checked against one plain process doing the same work.

Launched with DeepSpeed settings (a config file with a ``deepspeed_config`` section, or a
DeepSpeed JSON). Checks, for the ZeRO stage in force:

1. ``accelerator.gradient_accumulation_steps`` reports DeepSpeed's value (k);
2. W processes x batch b, k accumulation steps, clipping by DeepSpeed's gradient_clipping,
   AdamW and a StepLR stepping once per optimizer step that really ran, over 2 epochs of 5
   batches (windows of 2, 2 and a trailing 1), equal one plain process on the gathered
   batches (allclose 1e-5); ``clip_grad_norm_`` returns the plain run's norm before clipping (relative 2e-5);
3. ``get_state_dict`` is the full state dict keyed by the user's names; ``save_model`` writes
   a ``model.safetensors`` that plain ``safetensors`` reads back.

Prints ``RESULT {json}`` on the main process. ``--dummy``: the optimizer and scheduler come
from the DeepSpeed JSON (DummyOptim/DummyScheduler: AdamW and a linear WarmupLR) and the
reference follows the same rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_checks import make_data, make_model  # noqa: E402  (the same model and data)

from overdrive import GradientAccumulationPlugin  # noqa: E402
from overdrive.accelerator import Accelerator  # noqa: E402
from overdrive.ds.dummies import DummyOptim, DummyScheduler  # noqa: E402

ATOL = 1e-5
NORM_RTOL = 2e-5
WARMUP = 4
BATCHES_PER_EPOCH = 5


class Reference:
    """One plain process: steps on the gathered samples of each window, clips, schedules.

    ``warmup``: DeepSpeed's linear WarmupLR from 0 as a LambdaLR (else a StepLR). WarmupLR
    sets the learning rate of iteration i = (its steps so far) - 1, from 0 at iteration 0, so
    its first two optimizer steps both run at warmup_min_lr."""

    def __init__(self, max_norm: float, warmup: int = 0, advances: int = 1) -> None:
        self.model = make_model()
        self.advances = advances  # scheduler steps per optimizer step
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        if warmup:
            rule = lambda step: min(1.0, max(0, step - 1) / warmup)  # noqa: E731
            self.sched: Any = torch.optim.lr_scheduler.LambdaLR(self.opt, rule)
        else:
            self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        self.max_norm = max_norm

    def window(self, ds: TensorDataset, batches: list[torch.Tensor]) -> float:
        for idx in batches:
            _, x, y = ds[idx]
            (F.mse_loss(self.model(x), y) / len(batches)).backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.opt.step()
        for _ in range(self.advances):
            self.sched.step()
        self.opt.zero_grad()
        return float(norm)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--max_norm", type=float, default=0.05)
    parser.add_argument("--dummy", action="store_true")
    args = parser.parse_args()
    # the trailing partial window scaled to its own mean: overdrive's exact_accumulation
    acc = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(exact_accumulation=True)
    )
    world, b = acc.num_processes, 4
    ds = make_data(world * b * BATCHES_PER_EPOCH)
    model = make_model()
    if args.dummy:  # the optimizer and scheduler of the DeepSpeed JSON
        opt: Any = DummyOptim(model.parameters(), lr=1e-2, weight_decay=0.01)
        sched: Any = DummyScheduler(opt, warmup_num_steps=WARMUP)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    # A prepared torch scheduler advances once per process per optimizer step (Hugging Face
    # Accelerate's default); the JSON's scheduler belongs to the engine, which steps it once.
    advances = 1 if args.dummy else acc.num_processes
    ref = Reference(args.max_norm, warmup=WARMUP if args.dummy else 0, advances=advances)
    model, opt, sched, dl = acc.prepare(model, opt, sched, DataLoader(ds, batch_size=b))
    k = acc.gradient_accumulation_steps
    window: list[torch.Tensor] = []
    norm_diff, steps = 0.0, 0
    for _epoch in range(2):
        for idx, x, y in dl:
            with acc.accumulate(model):
                acc.backward(F.mse_loss(model(x), y))
                if acc.sync_gradients:
                    norm = acc.clip_grad_norm_(model.parameters(), args.max_norm)
                opt.step()
                sched.step()
                opt.zero_grad()
            window.append(acc.gather(idx).cpu())
            if acc.sync_gradients:
                want = ref.window(ds, window)
                norm_diff = max(norm_diff, abs(float(norm) - want) / want)
                window, steps = [], steps + 1
    state = acc.get_state_dict(model)
    out = Path(args.out)
    acc.save_model(model, out / "model")
    if acc.is_main_process:
        from safetensors.torch import load_file

        saved = load_file(str(out / "model" / "model.safetensors"))
        expected = ref.model.state_dict()
        assert sorted(state) == sorted(expected) == sorted(saved), (sorted(state), sorted(saved))
        diff = max((state[n].cpu() - expected[n]).abs().max().item() for n in expected)
        saved_diff = max((saved[n] - state[n].cpu()).abs().max().item() for n in expected)
        row = {
            "rank": acc.process_index,
            "type": str(acc.distributed_type),
            "stage": acc.strategy.config.zero_stage,
            "accumulation": k,
            "steps": steps,
            "lr": opt.param_groups[0]["lr"],
            "ref_lr": ref.opt.param_groups[0]["lr"],
            "max_diff": diff,
            "saved_diff": saved_diff,
            "norm_diff": norm_diff,
            "unwrapped": type(acc.unwrap_model(model)).__name__,
            "compiled": bool(getattr(model, "is_compiled", False)),
            "compiled_blocks": sorted(
                name
                for name, m in acc.unwrap_model(model).named_modules()
                if getattr(m, "_compiled_call_impl", None) is not None
            ),
            "basic_optimizer": type(opt.optimizer).__name__,
            "scheduler": type(getattr(sched.scheduler, "scheduler", sched.scheduler)).__name__,
        }
        print("RESULT " + json.dumps(row), flush=True)
        # The norm is a float32 sum over partitions in another order (offload: per-parameter
        # squares first): equal to a relative 2e-5; the parameters to 1e-5. The norm is
        # the check that catches a wrong gradient scale (AdamW's weights hide one).
        assert diff < ATOL and saved_diff == 0.0 and norm_diff < NORM_RTOL, row
    acc.wait_for_everyone()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
