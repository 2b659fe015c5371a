"""Training semantics on W processes, checked against one process doing the same work.

Runs unchanged under `overdrive launch`, `torchrun` and plain `python` (W = 1). Each check
trains a reference model in every process on the samples all processes saw together
(gathered by index), with plain PyTorch, and compares:

1. W processes x batch b  ==  1 process x batch W*b, 10 AdamW steps with clipping active;
2. k accumulation steps x b  ==  1 step x k*W*b, with a trailing partial window (7 micro-
   batches per epoch, k = 3: windows of 3, 3, 1; the last micro-batch holds W samples,
   padded by even_batches to b per process), over 2 epochs; the LR scheduler's count
   equals the optimizer steps taken; gradients differ across processes inside a window
   (no_sync) and agree when it closes;
3. DistributedDataParallelKwargs reach DDP; unwrap_model returns the user's module;
4. Accelerator(num_processes=4) under a different world is a clear error (a warning
   under plain python, which always runs one process);
5. with debug=True a collective called with different shapes raises, listing every rank.

Prints "ALL CHECKS PASSED world=W" on the main process.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from overdrive import (
    ConfigError,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    SchedulerKwargs,
)
from overdrive.accelerator import Accelerator
from overdrive.processes.ops import CollectiveMismatchError

# Measured here: parameters and norms within 3e-8 of one process, 1/60 of what allclose
# allows (1e-6 + 1e-5 relative). The 5-16-1 MLP's gradients all sit far above rounding, so
# AdamW amplifies no noise; the norms before clipping, compared every step, move in
# proportion to a wrong gradient scale that AdamW's weights would hide.
ATOL = 1e-6


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1))


def make_data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(
        torch.arange(n), torch.randn(n, 5, generator=g), torch.randn(n, 1, generator=g)
    )


def same_params(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.allclose(p, q, atol=ATOL) for p, q in zip(a.parameters(), b.parameters()))


def check_data_parallel(acc: Accelerator) -> None:
    world, b, steps, max_norm = acc.num_processes, 4, 10, 0.05
    ds = make_data(world * b * steps)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref = make_model()
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    model, opt, dl = acc.prepare(model, opt, DataLoader(ds, batch_size=b))
    clipped = 0
    for step, (idx, x, y) in enumerate(dl):
        acc.backward(F.mse_loss(model(x), y))
        norm = acc.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        opt.zero_grad()

        seen = acc.gather(idx)
        expected = torch.arange(step * world * b, (step + 1) * world * b)
        assert torch.equal(seen.sort().values, expected), (step, seen)
        _, rx, ry = ds[seen]
        F.mse_loss(ref(rx), ry).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        ref_opt.step()
        ref_opt.zero_grad()
        assert torch.allclose(norm, ref_norm, atol=ATOL), (step, norm, ref_norm)
        clipped += int(ref_norm > max_norm)
    assert step == steps - 1
    assert clipped > 0, "clipping never engaged; the check would prove nothing"
    assert same_params(acc.unwrap_model(model), ref), "W x b differs from 1 x W*b"


def check_accumulation(world_acc: Accelerator) -> None:
    k, b, micro = 3, 2, 7
    once = SchedulerKwargs(once_per_optimizer_step=True)  # overdrive's own schedule count
    # the trailing partial window scaled to its own mean: overdrive's exact_accumulation
    plugin = GradientAccumulationPlugin(num_steps=k, exact_accumulation=True)
    acc = Accelerator(cpu=True, gradient_accumulation_plugin=plugin, kwargs_handlers=[once])
    world = acc.num_processes
    ds = make_data(world * (b * (micro - 1) + 1))  # the last batch is short (and padded)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, lambda s: 1.0 / (1 + s))
    model, opt, sched, dl = acc.prepare(model, opt, sched, DataLoader(ds, batch_size=b))
    window: list[torch.Tensor] = []
    windows = []
    for _epoch in range(2):
        for idx, x, y in dl:
            with acc.accumulate(model):
                acc.backward(F.mse_loss(model(x), y))
                window.append(acc.gather(idx))
                grads = acc.gather(acc.unwrap_model(model)[0].weight.grad.reshape(1, -1))
                agree = all(torch.allclose(grads[0], g) for g in grads)
                if acc.sync_gradients:
                    assert agree, "gradients differ after the window closed"
                    acc.clip_grad_norm_(model.parameters(), 10.0)
                elif world > 1:
                    assert not agree, "gradients were synchronised inside a window"
                opt.step()
                sched.step()
                opt.zero_grad()
            if acc.sync_gradients:
                seen = torch.cat(window)
                windows.append(len(window))
                window = []
                _, rx, ry = ds[seen]
                F.mse_loss(ref(rx), ry).backward()
                ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 10.0)
                assert ref_norm < 10.0, "clipping must not hide a wrong scale here"
                ref_opt.step()
                ref_sched.step()
                ref_opt.zero_grad()
                assert same_params(acc.unwrap_model(model), ref), f"window {len(windows)}"
    assert windows == [3, 3, 1, 3, 3, 1], windows
    assert opt.steps_taken == 6
    assert sched.scheduler.last_epoch == opt.steps_taken == ref_sched.last_epoch
    assert sched.get_last_lr() == ref_sched.get_last_lr()


def check_ddp_kwargs(acc: Accelerator) -> None:
    if acc.num_processes == 1:
        return
    handler = DistributedDataParallelKwargs(
        bucket_cap_mb=1, find_unused_parameters=True, gradient_as_bucket_view=True
    )
    other = Accelerator(cpu=True, kwargs_handlers=[handler])
    model = make_model()
    wrapped = other.prepare(model)
    assert isinstance(wrapped, nn.parallel.DistributedDataParallel)
    assert wrapped.find_unused_parameters is True
    assert wrapped.gradient_as_bucket_view is True
    assert wrapped.bucket_bytes_cap == 1024 * 1024
    assert other.unwrap_model(wrapped) is model
    assert other.prepare(model) is wrapped  # the raw module again: no second DDP wrapper
    static = Accelerator(
        cpu=True, kwargs_handlers=[DistributedDataParallelKwargs(static_graph=True)]
    ).prepare(make_model())
    assert static.static_graph is True


def check_world_mismatch(acc: Accelerator) -> None:
    if acc.num_processes > 1:
        try:
            Accelerator(cpu=True, num_processes=4)
        except ConfigError as exc:
            text = str(exc)
            assert "4" in text and f"{acc.num_processes} processes" in text, text
            assert "--num_processes 4" in text, text
        else:
            raise AssertionError("num_processes=4 under a different world was accepted")
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Accelerator(cpu=True, num_processes=4)
    assert any("--num_processes 4" in str(w.message) for w in caught), caught


def check_debug_mismatch(acc: Accelerator) -> None:
    if acc.num_processes == 1:
        return
    debug = Accelerator(cpu=True, debug=True)
    try:
        debug.reduce(torch.zeros(acc.process_index + 2))
    except CollectiveMismatchError as exc:
        for r in range(acc.num_processes):
            assert f"rank {r}: <tensor>: [{r + 2}]" in str(exc), str(exc)
    else:
        raise AssertionError("debug mode let a shape mismatch through")


def main() -> None:
    acc = Accelerator(cpu=True)
    check_data_parallel(acc)
    check_accumulation(acc)
    check_ddp_kwargs(acc)
    check_world_mismatch(acc)
    check_debug_mismatch(acc)
    acc.wait_for_everyone()
    acc.print(f"ALL CHECKS PASSED world={acc.num_processes}")


if __name__ == "__main__":
    main()
