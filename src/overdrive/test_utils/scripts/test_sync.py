"""Self-check of gradient synchronisation: ``no_sync`` and ``accumulate`` against a plain
model trained by hand on the whole global batch.

Every process gets its own share of each global batch, so unsynchronised gradients differ
between processes and synchronised ones equal the reference's (the mean over the global
batch). On one process the no-sync paths change nothing, and the same checks still hold.
Run it alone, under ``overdrive launch``, or with ``debug_launcher(test_sync.main)``.
"""

from __future__ import annotations

import copy

import torch
from torch.nn.functional import mse_loss

from overdrive import Accelerator, GradientAccumulationPlugin
from overdrive.test_utils.scripts import (
    check,
    check_close,
    check_equal,
    grads_of,
    make_loader,
    params_of,
)
from overdrive.test_utils.training import RegressionDataset, RegressionModel
from overdrive.utils import gather

BATCH = 4  # samples per process per micro-batch
LR = 0.1
Batch = tuple[torch.Tensor, torch.Tensor]


def _models(accelerator: Accelerator) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A plain reference model and an identical copy for ``accelerator`` to prepare."""
    reference = RegressionModel(a=0.5, b=-0.5).to(accelerator.device)
    reference.first_batch = False  # no dtype print from every process
    return reference, copy.deepcopy(reference)


def _global_batches(accelerator: Accelerator, steps: int) -> list[Batch]:
    """``steps`` global batches (``BATCH`` samples per process each), the same everywhere."""
    size = BATCH * accelerator.num_processes
    data = RegressionDataset(length=size * steps, seed=42)
    x = torch.from_numpy(data.x).to(accelerator.device)
    y = torch.from_numpy(data.y).to(accelerator.device)
    return [(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(steps)]


def _share(accelerator: Accelerator, batch: Batch) -> Batch:
    """This process's contiguous part of a global batch (where a prepared loader puts it)."""
    start = accelerator.process_index * BATCH
    return batch[0][start : start + BATCH], batch[1][start : start + BATCH]


def _local_grads(model: torch.nn.Module, batch: Batch, scale: float = 1.0) -> list[torch.Tensor]:
    """The gradient of ``model``'s mean loss on ``batch``, without touching ``.grad``."""
    loss = mse_loss(model(batch[0]), batch[1]) * scale
    return [g.detach().cpu() for g in torch.autograd.grad(loss, list(model.parameters()))]


def _check_grads(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    check_close(torch.stack(got), torch.stack(want), what)


def _differs_across_processes(accelerator: Accelerator, grads: list[torch.Tensor]) -> bool:
    """True when some process holds other gradients than process 0 (False on one process)."""
    rows = gather(torch.stack(grads)[None].to(accelerator.device)).cpu()
    return any(not torch.allclose(row, rows[0], atol=1e-6) for row in rows[1:])


def _sgd_by_hand(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(LR * p.grad)
                p.grad = None


def check_no_sync(accelerator: Accelerator) -> None:
    """Backward inside ``no_sync`` keeps each process's own gradient; the next backward
    outside it averages everything accumulated since, over every process."""
    reference, model = _models(accelerator)
    model = accelerator.prepare(model)
    multi = accelerator.num_processes > 1
    for step, batch in enumerate(_global_batches(accelerator, 6)):
        mine = _share(accelerator, batch)
        local = _local_grads(reference, mine)
        mse_loss(reference(batch[0]), batch[1]).backward()
        if step % 2 == 0:
            with accelerator.no_sync(model):
                accelerator.backward(mse_loss(model(mine[0]), mine[1]))
            grads = grads_of(model)
            _check_grads(grads, local, f"step {step}: gradient inside no_sync")
            if multi:
                check(
                    _differs_across_processes(accelerator, grads),
                    f"step {step}: gradients were synchronised inside no_sync",
                )
            continue
        accelerator.backward(mse_loss(model(mine[0]), mine[1]))
        grads = grads_of(model)
        _check_grads(grads, grads_of(reference), f"step {step}: gradient after no_sync")
        check(
            not _differs_across_processes(accelerator, grads),
            f"step {step}: gradients are not synchronised outside no_sync",
        )
        _sgd_by_hand(model)
        _sgd_by_hand(reference)
        for p, q in zip(params_of(model), params_of(reference)):
            check_close(p, q, f"step {step}: parameters after the update")


def check_accumulate(k: int, sync_each_batch: bool = False) -> None:
    """``accumulate`` over ``k`` micro-batches: gradients stay local (unless
    ``sync_each_batch``) until the window's last one, and the optimizer steps only there."""
    plugin = GradientAccumulationPlugin(num_steps=k, sync_each_batch=sync_each_batch)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    reference, model = _models(accelerator)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    multi = accelerator.num_processes > 1
    local = [torch.zeros(()) for _ in reference.parameters()]
    label = f"accumulate(k={k}, sync_each_batch={sync_each_batch})"
    for step, batch in enumerate(_global_batches(accelerator, 2 * k)):
        mine = _share(accelerator, batch)
        local = [a + b for a, b in zip(local, _local_grads(reference, mine, 1 / k))]
        (mse_loss(reference(batch[0]), batch[1]) / k).backward()
        with accelerator.accumulate(model):
            accelerator.backward(mse_loss(model(mine[0]), mine[1]))
            last = (step + 1) % k == 0
            check_equal(accelerator.sync_gradients, last, f"{label} step {step}: sync_gradients")
            grads = grads_of(model)
            if last or sync_each_batch:
                want, what = grads_of(reference), "synchronised gradient"
            else:
                want, what = local, "local gradient inside the window"
            _check_grads(grads, want, f"{label} step {step}: {what}")
            if multi:
                check(
                    _differs_across_processes(accelerator, grads) != (last or sync_each_batch),
                    f"{label} step {step}: gradients synchronised at the wrong time",
                )
            optimizer.step()
            optimizer.zero_grad()
        if last:
            ref_optimizer.step()
            ref_optimizer.zero_grad()
            local = [torch.zeros(()) for _ in reference.parameters()]
        for p, q in zip(params_of(model), params_of(reference)):
            check_close(p, q, f"{label} step {step}: parameters (optimizer steps per window)")


def check_accumulate_short_last_window() -> None:
    """A prepared loader of 3 micro-batches with k=2 closes its last window after one; the
    step then equals one on that window's mean loss divided by k, as in Hugging Face
    Accelerate (with ``exact_accumulation``: on the mean loss itself)."""
    for exact in (False, True):
        _check_short_last_window(exact)


def _check_short_last_window(exact: bool) -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, exact_accumulation=exact)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    reference, model = _models(accelerator)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    batches = _global_batches(accelerator, 3)
    data = RegressionDataset(length=3 * BATCH * accelerator.num_processes, seed=42)
    loader = make_loader(data, BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    flags = []
    for step, sample in enumerate(loader):
        with accelerator.accumulate(model):
            expected_x = _share(accelerator, batches[step])[0]
            check_close(sample["x"], expected_x, f"prepared loader step {step}: inputs")
            accelerator.backward(mse_loss(model(sample["x"]), sample["y"]))
            flags.append(accelerator.sync_gradients)
            optimizer.step()
            optimizer.zero_grad()
    check_equal(flags, [False, True, True], "sync_gradients over a 3-batch loader with k=2")
    for window in ([0, 1], [2]):
        x = torch.cat([batches[i][0] for i in window])
        y = torch.cat([batches[i][1] for i in window])
        scale = 1.0 if exact else len(window) / 2  # the short window: its sum over k=2
        (mse_loss(reference(x), y) * scale).backward()
        ref_optimizer.step()
        ref_optimizer.zero_grad()
    for p, q in zip(params_of(model), params_of(reference)):
        check_close(p, q, f"parameters after a short last window (exact_accumulation={exact})")


def main() -> None:
    accelerator = Accelerator()
    check_no_sync(accelerator)
    for k, each in ((1, False), (2, False), (3, False), (2, True)):
        check_accumulate(k, sync_each_batch=each)
    check_accumulate_short_last_window()
    accelerator.print(f"test_sync: all checks passed on {accelerator.num_processes} process(es)")


if __name__ == "__main__":
    main()
