"""The script `overdrive test` launches: one group, one all-reduce, one DDP step, all checked.

Run on every process through ``overdrive launch`` (or alone, as one process). Any mismatch
raises on the rank that sees it, so the launcher's report names that rank and the reason.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence

import torch
from torch.nn.functional import mse_loss

from overdrive.accelerator import Accelerator

BATCH_PER_PROCESS = 2
FEATURES = 4
MAX_SKIPPED_STEPS = 40


def check_close(name: str, got: Sequence[float], expected: float, tolerance: float) -> None:
    """Every rank's value ``got`` must be within ``tolerance`` of ``expected``."""
    bad = [(rank, value) for rank, value in enumerate(got) if abs(value - expected) > tolerance]
    if bad:
        listed = ", ".join(f"rank {rank}: {value!r}" for rank, value in bad)
        raise RuntimeError(
            f"sanity check failed: {name} should be {expected!r} on every rank "
            f"(tolerance {tolerance}), but {listed}"
        )


def _full_batch(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same inputs and targets on every rank; each rank trains on its own slice."""
    count = world * BATCH_PER_PROCESS
    inputs = torch.linspace(-1.0, 1.0, count * FEATURES).reshape(count, FEATURES)
    targets = inputs.sum(dim=1, keepdim=True) * 0.5 + 0.25
    return inputs, targets


def _reference_loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Loss on the full batch after one plain SGD step on the full batch (one process)."""
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    mse_loss(ref(inputs), targets).backward()
    opt.step()
    with torch.no_grad():
        return float(mse_loss(ref(inputs), targets))


def run() -> str | None:
    """Do the checks; the main process gets a one-line summary (RuntimeError on a mismatch)."""
    accelerator = Accelerator()
    state = accelerator.state
    world, rank, device = state.num_processes, state.process_index, state.device

    summed = accelerator.reduce(torch.tensor([float(rank)], device=device), "sum")
    seen = accelerator.gather(summed.reshape(1)).cpu().tolist()  # what each rank got
    check_close("the all-reduce of rank numbers", seen, world * (world - 1) / 2, 0)

    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    inputs, targets = _full_batch(world)
    expected = _reference_loss(model, inputs, targets)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    share = slice(rank * BATCH_PER_PROCESS, (rank + 1) * BATCH_PER_PROCESS)
    x, y = inputs[share].to(device), targets[share].to(device)
    for _ in range(MAX_SKIPPED_STEPS):  # fp16 loss scaling skips steps until the scale fits
        accelerator.backward(mse_loss(model(x).float(), y))
        optimizer.step()
        optimizer.zero_grad()
        if not accelerator.optimizer_step_was_skipped:
            break
    with torch.no_grad():
        after = mse_loss(model(inputs.to(device)).float(), targets.to(device))
    losses = accelerator.gather(after.detach().reshape(1)).cpu().tolist()
    exact = accelerator.mixed_precision == "no"
    check_close(
        "the full-batch loss after one training step", losses, expected, 1e-5 if exact else 5e-2
    )
    accelerator.wait_for_everyone()
    backend, is_main = state.backend or "none", state.is_main_process
    state.destroy_process_group()
    if not is_main:
        return None
    return (
        f"OK: {world} process(es) on {device.type}, backend {backend}, "
        f"{state.distributed_type.value}, mixed precision {accelerator.mixed_precision}; "
        "all-reduce and one training step agree on every rank"
    )


def main() -> int:
    summary = run()
    if summary is not None:
        sys.stdout.write(summary + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
