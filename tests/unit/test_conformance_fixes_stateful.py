"""``use_stateful_dataloader=True``: prepared and hand-built loaders read through torchdata's
StatefulDataLoader, are one, and resume from its state (Hugging Face Accelerate's
StatefulDataLoaderTester and test_save_model_with_stateful_dataloader_*)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from overdrive import Accelerator, DataLoaderConfiguration
from overdrive.data_loader import DataLoaderDispatcher, DataLoaderShard, SkipDataLoader
from overdrive.state import GradientState

stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")
StatefulDataLoader = stateful_dataloader.StatefulDataLoader


class CountingStream(IterableDataset):
    """0..n-1, resumable by its own state; counts the items it produces."""

    def __init__(self, n: int) -> None:
        self.n, self.pos, self.reads = n, 0, 0
        self._start: int | None = None

    def __iter__(self) -> Any:
        start, self._start = self._start or 0, None
        for i in range(start, self.n):
            self.reads += 1
            self.pos = i + 1
            yield torch.tensor([i])

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._start = self.pos = int(state["pos"])


def _accelerator(**kwargs: Any) -> Accelerator:
    config = DataLoaderConfiguration(use_stateful_dataloader=True, **kwargs)
    return Accelerator(cpu=True, dataloader_config=config)


def test_prepared_loaders_are_stateful_dataloaders_only_when_asked() -> None:
    data = TensorDataset(torch.arange(8))
    stateful = _accelerator()
    assert stateful.use_stateful_dataloader
    assert isinstance(stateful.prepare(DataLoader(data, batch_size=2)), StatefulDataLoader)
    plain = Accelerator(cpu=True)
    assert not plain.use_stateful_dataloader
    assert not isinstance(plain.prepare(DataLoader(data, batch_size=2)), StatefulDataLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("dispatch", [False, True])
def test_save_and_load_state_resume_mid_epoch(
    tmp_path: Path, num_workers: int, dispatch: bool
) -> None:
    acc = _accelerator(dispatch_batches=dispatch)
    loader = acc.prepare(
        DataLoader(TensorDataset(torch.arange(30)), batch_size=3, num_workers=num_workers)
    )
    seen = []
    for step, (batch,) in enumerate(loader):
        seen.append(batch.tolist())
        if step == 2:
            acc.save_state(str(tmp_path / "ckpt"))
            middle = loader.state_dict()
    assert middle["batches_yielded"] == 3
    assert middle["stateful_dataloader"]["state"]  # the StatefulDataLoader's own state
    acc.load_state(str(tmp_path / "ckpt"))
    assert [b.tolist() for (b,) in loader] == seen[3:]
    # the epoch after it is whole
    assert [b.tolist() for (b,) in loader] == seen


def test_a_stateful_dataset_resumes_from_its_state_without_being_read_again() -> None:
    first = _accelerator()
    stream = CountingStream(20)
    loader = first.prepare(DataLoader(stream, batch_size=2))
    seen = []
    for step, batch in enumerate(loader):
        seen.append(batch.flatten().tolist())
        if step == 3:
            state = loader.state_dict()
    second = _accelerator()
    fresh = CountingStream(20)
    resumed = second.prepare(DataLoader(fresh, batch_size=2))
    resumed.load_state_dict(state)
    assert [b.flatten().tolist() for b in resumed] == seen[4:]
    assert fresh.reads == 20 - 8  # started at item 8: nothing read twice


@pytest.mark.parametrize("num_workers", [0, 2])
def test_hand_built_loaders_hold_the_stateful_dataloaders_state(num_workers: int) -> None:
    def g() -> torch.Generator:
        return torch.Generator().manual_seed(3)

    data = list(range(40))
    reference = StatefulDataLoader(data, batch_size=4, num_workers=num_workers, generator=g())
    expected = [b for _, b in zip(range(5), reference)]
    for cls in (DataLoaderShard, SkipDataLoader, DataLoaderDispatcher):
        loader = cls(
            data, batch_size=4, num_workers=num_workers, generator=g(), use_stateful_dataloader=True
        )
        assert isinstance(loader, (StatefulDataLoader, cls)) and loader.use_stateful_dataloader
        assert isinstance(loader, StatefulDataLoader) and isinstance(loader, cls)
        got = [b for _, b in zip(range(5), loader)]
        assert all(torch.equal(a, b) for a, b in zip(expected, got))
        assert loader.state_dict() == reference.state_dict()
        again = cls(
            data, batch_size=4, num_workers=num_workers, generator=g(), use_stateful_dataloader=True
        )
        again.load_state_dict(loader.state_dict())
        assert [b.tolist() for b in again] == [list(range(i, i + 4)) for i in range(20, 40, 4)]


def test_end_of_dataloader_and_the_finished_mark() -> None:
    loader = DataLoaderShard(list(range(8)), batch_size=4, use_stateful_dataloader=True)
    ends = []
    for _ in loader:
        ends.append(loader.end_of_dataloader)
        finished = loader.state_dict()["_iterator_finished"]
    assert ends == [False, True] and finished


def test_a_dispatcher_sets_up_the_gradient_state() -> None:
    GradientState._reset_state()
    assert GradientState._shared_state == {}
    DataLoaderDispatcher(range(8), batch_size=4)
    assert GradientState._shared_state != {}
    assert GradientState().active_dataloader is None
