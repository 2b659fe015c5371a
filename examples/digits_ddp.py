"""Train a small MLP on scikit-learn's bundled digits across processes; print held-out accuracy.

    overdrive launch --num_processes 2 examples/digits_ddp.py
    python examples/digits_ddp.py            # the same script on one process

Nothing is downloaded: the digits (1,797 8x8 images) ship with scikit-learn.
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

from overdrive import Accelerator, SchedulerKwargs, set_seed


def datasets() -> tuple[TensorDataset, TensorDataset]:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=0.25, random_state=0, stratify=y
    )

    def as_tensors(a, b) -> TensorDataset:  # type: ignore[no-untyped-def]
        return TensorDataset(torch.tensor(a, dtype=torch.float32), torch.tensor(b))

    return as_tensors(x_train, y_train), as_tensors(x_test, y_test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    # The schedule below is sized in optimizer steps of one process (len(train_dl) after
    # prepare), so it must advance once per optimizer step, whatever the number of processes.
    accelerator = Accelerator(kwargs_handlers=[SchedulerKwargs(once_per_optimizer_step=True)])
    set_seed(0)
    train, test = datasets()
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    train_dl = DataLoader(train, batch_size=args.batch_size, shuffle=True)
    test_dl = DataLoader(test, batch_size=64)
    model, optimizer, train_dl, test_dl = accelerator.prepare(model, optimizer, train_dl, test_dl)
    steps_per_epoch = len(train_dl)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs * steps_per_epoch
    )
    scheduler = accelerator.prepare(scheduler)

    accelerator.print(
        f"{accelerator.num_processes} process(es) on {accelerator.device}, "
        f"{len(train)} training and {len(test)} held-out images"
    )
    bar = tqdm(
        total=args.epochs * steps_per_epoch,
        disable=not accelerator.is_main_process,
        desc="training",
    )
    for _epoch in range(args.epochs):
        model.train()
        for x, y in train_dl:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
    bar.close()

    model.eval()
    predictions, labels = [], []
    with torch.no_grad():
        for x, y in test_dl:
            pred = model(x).argmax(dim=-1)
            pred, y = accelerator.gather_for_metrics((pred, y))
            predictions.append(pred)
            labels.append(y)
    predictions, labels = torch.cat(predictions), torch.cat(labels)
    accuracy = (predictions == labels).float().mean().item()
    accelerator.print(f"held-out accuracy: {accuracy:.3f} on {len(labels)} images (of {len(test)})")


if __name__ == "__main__":
    main()
