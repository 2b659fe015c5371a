"""A simulated rank reads its DataLoader as the real one does, worker processes and all:
every rank, not only rank 0 (whose shuffled order, or whose batches of an iterable dataset,
a real run broadcasts), takes its steps, and the batches the workers send count in the
rank's memory as batches it read itself do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
from overdrive import Accelerator
from overdrive.utils import DataLoaderConfiguration


class Ramp(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.full((8,), i / 64)
        return x, x.sum(dim=0, keepdim=True)


class Stream(IterableDataset):
    def __iter__(self):
        return (Ramp()[i] for i in range(64))


stateful = sys.argv[2] == "stateful"  # torchdata's StatefulDataLoader, its own workers
acc = Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful))
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if sys.argv[1] == "stream":  # dispatched: only rank 0 reads in a real run
    loader = DataLoader(Stream(), batch_size=4)
else:
    loader = DataLoader(Ramp(), batch_size=4, shuffle=True, num_workers=int(sys.argv[1]))
model, opt, loader = acc.prepare(model, opt, loader)
for x, y in loader:
    acc.backward(torch.nn.functional.mse_loss(model(x), y))
    opt.step()
    opt.zero_grad()
"""


def _simulate(tmp_path: Path, workers: int | str, reader: str = "plain") -> list[dict]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    report = tmp_path / f"report_{workers}.json"
    launch = [sys.executable, "-m", "overdrive.cli.main", "launch", "--simulate", "--cpu"]
    launch += [
        "--num_processes",
        "2",
        "--simulate_json",
        str(report),
        str(script),
        str(workers),
        reader,
    ]
    result = subprocess.run(launch, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks: list[dict] = json.loads(report.read_text())["ranks"]
    return ranks


def test_a_shuffled_loader_with_worker_processes_on_every_simulated_rank(tmp_path: Path) -> None:
    with_workers = _simulate(tmp_path, workers=2)
    in_process = _simulate(tmp_path, workers=0)
    for ranks in (with_workers, in_process):
        assert [(r["rank"], r["steps"]) for r in ranks] == [(0, 2), (1, 2)], ranks
    for worked, read in zip(with_workers, in_process, strict=True):
        # the workers' batches are the rank's own tensors (and a prefetched one more)
        batch = 4 * 8 * 4 + 4 * 1 * 4
        held, own = worked["peak_bytes"]["Activation"], read["peak_bytes"]["Activation"]
        assert held >= own >= batch, (held, own)


def test_an_iterable_dataset_dispatched_from_rank_0_feeds_every_simulated_rank(
    tmp_path: Path,
) -> None:
    ranks = _simulate(tmp_path, workers="stream")
    assert [(r["rank"], r["steps"]) for r in ranks] == [(0, 2), (1, 2)], ranks
    for rank in ranks:
        # each step's batch reaches every rank by a broadcast of its two tensors
        step = rank["collectives_per_step"][-1]
        assert step["broadcast"]["count"] == 2, step


def test_torchdatas_stateful_loader_with_worker_processes_on_every_simulated_rank(
    tmp_path: Path,
) -> None:
    ranks = _simulate(tmp_path, workers=2, reader="stateful")
    assert [(r["rank"], r["steps"]) for r in ranks] == [(0, 2), (1, 2)], ranks
