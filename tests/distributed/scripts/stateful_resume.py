"""use_stateful_dataloader on every process: a run saves mid-epoch and goes on; a fresh
Accelerator loads that state and must see the rest of the epoch exactly (sharded,
dispatched and iterable loaders, an uneven last round padded as in the whole run). Each
rank prints ``RESULT {json}`` per case."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from overdrive import Accelerator, DataLoaderConfiguration, set_seed

N, SAVE_AT = 22, 2  # 22 samples, 2 per rank on 2 ranks: 6 rounds, the last one padded


class Stream(IterableDataset):
    """0..N-1, resumable by its own state; counts the items it produces."""

    def __init__(self) -> None:
        self.pos, self.reads = 0, 0
        self._start: int | None = None

    def __iter__(self) -> Any:
        start, self._start = self._start or 0, None
        for i in range(start, N):
            self.reads += 1
            self.pos = i + 1
            yield torch.tensor([i])

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._start = self.pos = int(state["pos"])


def _loader(case: str) -> tuple[Accelerator, Any, Any]:
    set_seed(11)
    config = DataLoaderConfiguration(
        dispatch_batches=case in ("dispatch", "iterable_dispatch"), use_stateful_dataloader=True
    )
    acc = Accelerator(cpu=True, dataloader_config=config)
    if case.startswith("iterable"):
        data: Any = Stream()
        loader = DataLoader(data, batch_size=2)
    else:
        data = TensorDataset(torch.arange(N).unsqueeze(1))
        loader = DataLoader(data, batch_size=2, shuffle=case == "shard")
    return acc, acc.prepare(loader), data


def _ids(batch: Any) -> list[int]:
    tensor = batch[0] if isinstance(batch, (list, tuple)) else batch
    return tensor.flatten().tolist()


def run(case: str, folder: Path) -> dict[str, Any]:
    acc, loader, _ = _loader(case)
    seen = []
    for step, batch in enumerate(loader):
        seen.append(_ids(batch))
        if step == SAVE_AT:
            acc.save_state(str(folder))
    acc, loader, data = _loader(case)
    acc.load_state(str(folder))
    resumed = [_ids(batch) for batch in loader]
    return {
        "case": case,
        "rank": acc.process_index,
        "full": seen,
        "resumed": resumed,
        "reads": getattr(data, "reads", None),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    for case in ("shard", "dispatch", "iterable", "iterable_dispatch"):
        print("RESULT " + json.dumps(run(case, out / case)), flush=True)


if __name__ == "__main__":
    main()
