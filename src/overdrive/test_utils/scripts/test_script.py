"""Self-check of a whole run: process state, splitting work, sharded data, training on N
processes against one process by hand, ``gather_for_metrics``, checkpoints and RNG sync.

Run it alone (``python test_script.py``), under ``overdrive launch``, or with
``debug_launcher(test_script.main)``. Processes share a temporary folder made by the main
process, so several machines need a shared file system.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch.nn.functional import mse_loss
from torch.utils.data import DataLoader

from overdrive import Accelerator, DataLoaderConfiguration, synchronize_rng_states
from overdrive.test_utils.scripts import (
    check,
    check_close,
    check_equal,
    make_loader,
    params_of,
)
from overdrive.test_utils.training import RegressionDataset, RegressionModel
from overdrive.utils import broadcast_object_list, gather, gather_object

BATCH = 4  # samples per process per batch
LR = 0.05
EPOCHS = 3


def _same_everywhere(accelerator: Accelerator, value: torch.Tensor) -> bool:
    rows = gather(value.detach()[None].to(accelerator.device)).cpu()
    return all(torch.equal(row, rows[0]) for row in rows)


def check_process_state(accelerator: Accelerator, shared: Path) -> None:
    """Rank, world size and the main/last flags agree with the launcher and each other."""
    r, n = accelerator.process_index, accelerator.num_processes
    check_equal(n, int(os.environ.get("WORLD_SIZE", "1")), "num_processes vs WORLD_SIZE")
    check_equal(r, int(os.environ.get("RANK", "0")), "process_index vs RANK")
    check_equal(gather_object([r]), list(range(n)), "every process index once")
    check_equal(accelerator.is_main_process, r == 0, "is_main_process")
    check_equal(accelerator.state.is_last_process, r == n - 1, "is_last_process")
    on_main = accelerator.on_main_process(lambda: r)()
    check_equal(on_main, 0 if r == 0 else None, "on_main_process runs on process 0 only")
    marker = shared / "written-by-main"
    with accelerator.main_process_first():
        if accelerator.is_main_process:
            marker.write_text("first")
        else:
            check(marker.is_file(), "main_process_first let another process in first")
    accelerator.wait_for_everyone()


def _check_split(accelerator: Accelerator, items: list[int], what: str) -> None:
    size = -(-len(items) // accelerator.num_processes)  # ceil: the padded share
    with accelerator.split_between_processes(items) as mine:
        shares = gather_object([list(mine)])
    check_equal([x for share in shares for x in share], items, f"{what}: shares in order")
    sizes = [len(share) for share in shares]
    check(sorted(sizes, reverse=True) == sizes and sizes[0] - sizes[-1] <= 1, f"sizes {sizes}")
    with accelerator.split_between_processes(items, apply_padding=True) as padded:
        mine_padded = list(padded)
    own = shares[accelerator.process_index]
    check_equal(len(mine_padded), size, f"{what}: padded length")
    check_equal(mine_padded[: len(own)], own, f"{what}: padding keeps the real share first")
    filler = own[-1] if own else items[-1]
    check(all(x == filler for x in mine_padded[len(own) :]), f"{what}: padding {mine_padded}")


def check_split_between_processes(accelerator: Accelerator) -> None:
    """Lists, tensors and dicts are cut into contiguous shares that cover the input once."""
    n = accelerator.num_processes
    for length in sorted({3 * n, 3 * n + 1, max(n - 1, 1)}):
        _check_split(accelerator, list(range(length)), f"split of {length} items")
    table = torch.arange(2 * (2 * n + 1)).view(-1, 2)
    with accelerator.split_between_processes({"t": table, "tag": "x"}) as mine:
        check_equal(mine["tag"], "x", "split keeps a dict's non-list entries")
        rows = gather(mine["t"].to(accelerator.device)).cpu()
    check_equal(rows, table, "split of a tensor inside a dict, gathered back")


def _loader_epoch(accelerator: Accelerator, length: int) -> list[int]:
    """Every sample index this process sees in one epoch of a prepared loader."""
    loader = accelerator.prepare(make_loader(list(range(length)), BATCH))
    return [i for batch in loader for i in batch.tolist()]


def check_data_sharding(accelerator: Accelerator) -> None:
    """A prepared loader covers the dataset exactly once over the processes; with
    ``even_batches`` (the default) the last round is filled from the start of the epoch."""
    n = accelerator.num_processes
    length = 2 * n * BATCH + 3
    loader = accelerator.prepare(make_loader(list(range(length)), BATCH))
    rounds = -(-length // (n * BATCH))
    check_equal(len(loader), rounds, "len() of a prepared loader: batches per process")
    seen = [i for batch in loader for i in gather(batch).tolist()]
    check_equal(seen, [i % length for i in range(len(seen))], "gathered batches, in order")
    if n > 1:
        sizes = {len(batch) for batch in loader}
        check_equal(sizes, {BATCH}, "even_batches: every batch is full")
    metrics = [i for batch in loader for i in accelerator.gather_for_metrics(batch).tolist()]
    check_equal(metrics, list(range(length)), "gather_for_metrics drops the repeated tail")

    uneven = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    mine = _loader_epoch(uneven, length)
    everything = sorted(i for share in gather_object([mine]) for i in share)
    check_equal(everything, list(range(length)), "even_batches=False: each sample once")

    split = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=True))
    loader = split.prepare(make_loader(list(range(4 * n * BATCH)), n * BATCH))
    check_equal({len(b) for b in loader}, {BATCH}, "split_batches: per-process batch size")

    check_shuffled_order(accelerator)


def check_shuffled_order(accelerator: Accelerator) -> None:
    """A shuffled loader with a seeded generator gives, round by round and epoch after
    epoch, the global batches a plain loader with the same seed gives."""
    n, items = accelerator.num_processes, list(range(4 * accelerator.num_processes * BATCH))
    shuffled = make_loader(items, BATCH, shuffle=True, generator=torch.Generator().manual_seed(3))
    loader = accelerator.prepare(shuffled)
    plain = make_loader(items, n * BATCH, shuffle=True, generator=torch.Generator().manual_seed(3))
    for epoch in range(2):
        got = [gather(batch).tolist() for batch in loader]
        want = [batch.tolist() for batch in plain]
        check_equal(got, want, f"epoch {epoch}: shuffled global batches vs a plain loader")
        check_equal(sorted(sum(got, [])), items, f"epoch {epoch}: each sample once")


def _train_by_hand(data: RegressionDataset, global_batch: int) -> torch.nn.Module:
    """The reference: one process, plain PyTorch, each step on the whole global batch."""
    model = RegressionModel(a=1.0, b=1.0)
    model.first_batch = False
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for _ in range(EPOCHS):
        for batch in make_loader(data, global_batch):
            mse_loss(model(batch["x"]), batch["y"]).backward()
            optimizer.step()
            optimizer.zero_grad()
    return model


def check_training(accelerator: Accelerator, shared: Path) -> None:
    """N processes × BATCH samples train the same weights as 1 process × N·BATCH, then a
    checkpoint brings back the weights, optimizer state and RNG it saved."""
    n = accelerator.num_processes
    data = RegressionDataset(length=8 * n * BATCH, seed=7)
    model = RegressionModel(a=1.0, b=1.0)
    model.first_batch = False
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loader = make_loader(data, BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(EPOCHS):
        for batch in loader:
            accelerator.backward(mse_loss(model(batch["x"]), batch["y"]))
            optimizer.step()
            optimizer.zero_grad()
    reference = _train_by_hand(data, n * BATCH)
    for got, want in zip(params_of(model), params_of(reference)):
        check_close(got, want, f"weights after training on {n} process(es) vs one by hand")
        check(_same_everywhere(accelerator, got), "the processes ended with different weights")
    check_gather_for_metrics(accelerator, model)
    check_save_load(accelerator, model, optimizer, loader, shared / "checkpoint")


def check_gather_for_metrics(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Evaluation on a dataset the processes cannot split evenly gives back each sample
    once, in order, for tensors and for Python objects."""
    length = 2 * accelerator.num_processes * BATCH + 3
    data = RegressionDataset(length=length, seed=11)
    loader = accelerator.prepare(make_loader(data, BATCH))
    model.eval()
    predictions, labels, tags = [], [], []
    with torch.no_grad():
        for batch in loader:
            out = accelerator.gather_for_metrics((model(batch["x"]), batch["y"]))
            predictions.append(out[0].cpu())
            labels.append(out[1].cpu())
            words = [f"{y:.4f}" for y in batch["y"].tolist()]
            tags += accelerator.gather_for_metrics(words, use_gather_object=True)
    model.train()
    unwrapped = accelerator.unwrap_model(model)
    with torch.no_grad():
        expected = unwrapped(torch.from_numpy(data.x).to(accelerator.device)).cpu()
    check_close(torch.cat(predictions), expected, "gather_for_metrics of predictions")
    check_equal(torch.cat(labels), torch.from_numpy(data.y), "gather_for_metrics of labels")
    check_equal(tags, [f"{y:.4f}" for y in data.y.tolist()], "gather_for_metrics of objects")


def check_save_load(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: DataLoader,
    folder: Path,
) -> None:
    """save_state then more training then load_state: back to what was saved."""
    accelerator.save_state(str(folder))
    saved = params_of(model)
    momentum = [optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    after_save = torch.rand(3)
    for batch in loader:
        accelerator.backward(mse_loss(model(batch["x"]), batch["y"]))
        optimizer.step()
        optimizer.zero_grad()
    check(not torch.equal(params_of(model)[0], saved[0]), "training after save changed nothing")
    accelerator.load_state(str(folder))
    for got, want in zip(params_of(model), saved):
        check_equal(got, want, "weights after load_state")
    for p, want in zip(model.parameters(), momentum):
        check_equal(optimizer.state[p]["momentum_buffer"], want, "momentum after load_state")
    check_equal(torch.rand(3), after_save, "torch RNG after load_state")


def check_rng_sync(accelerator: Accelerator) -> None:
    """``synchronize_rng_states`` gives every process process 0's streams."""
    r = accelerator.process_index
    torch.manual_seed(100 + r)
    random.seed(100 + r)
    np.random.seed(100 + r)
    generator = torch.Generator().manual_seed(200 + r)
    synchronize_rng_states(["torch", "python", "numpy", "generator"], generator=generator)
    check(_same_everywhere(accelerator, torch.rand(4)), "torch RNG differs after sync")
    check(_same_everywhere(accelerator, torch.rand(4, generator=generator)), "generator")
    check_equal(len(set(gather_object([random.random()]))), 1, "python RNG after sync")
    check_equal(len(set(gather_object([float(np.random.rand())]))), 1, "numpy RNG after sync")
    synced = Accelerator(rng_types=["torch"])
    torch.manual_seed(300 + r)
    loader = synced.prepare(make_loader(list(range(8 * synced.num_processes)), 2))
    next(iter(loader))
    check(_same_everywhere(synced, torch.rand(4)), "rng_types=['torch'] at the epoch start")


def _shared_folder(accelerator: Accelerator) -> Path:
    box = [tempfile.mkdtemp(prefix="overdrive-self-test-") if accelerator.is_main_process else None]
    broadcast_object_list(box)
    return Path(str(box[0]))


def main() -> None:
    accelerator = Accelerator()
    shared = _shared_folder(accelerator)
    try:
        check_process_state(accelerator, shared)
        check_split_between_processes(accelerator)
        check_data_sharding(accelerator)
        check_training(accelerator, shared)
        check_rng_sync(accelerator)
        accelerator.wait_for_everyone()
    finally:
        if accelerator.is_main_process:
            shutil.rmtree(shared, ignore_errors=True)
    accelerator.print(f"test_script: all checks passed on {accelerator.num_processes} process(es)")


if __name__ == "__main__":
    main()
