"""Prepared dataloaders on one process: lookahead, resume, skipping, metrics, placement."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from overdrive.config import load_settings
from overdrive.data import gather_for_metrics, prepare_data_loader, skip_first_batches
from overdrive.state import PartialState
from overdrive.training.loop_state import LoaderProgress, LoopState

STATE = PartialState(settings=load_settings(environ={}), environ={})


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def _prep(loader: DataLoader, loop: LoopState | None = None, **kw):
    return prepare_data_loader(loader, state=STATE, loop_state=loop or LoopState(), **kw)


@pytest.mark.parametrize("iterable", [False, True])
def test_end_of_dataloader_is_known_on_the_last_batch(iterable: bool) -> None:
    loop = LoopState()
    data = Stream(7) if iterable else TensorDataset(torch.arange(7))
    dl = _prep(DataLoader(data, batch_size=3), loop)
    seen = []
    for _ in dl:
        seen.append((loop.batch_index, loop.end_of_dataloader, loop.remainder))
    assert seen == [(0, False, -1), (1, False, -1), (2, True, 1)]
    assert not loop.in_dataloader and loop.remainder == -1


def test_loop_state_stack_removes_the_right_entry() -> None:
    loop, a, b = LoopState(), LoaderProgress(remainder=1), LoaderProgress(remainder=2)
    loop.begin(a)
    loop.begin(b)
    assert loop.remainder == 2
    loop.end(a)
    assert loop.active is b
    loop.end(b)
    assert loop.active is None and not loop.end_of_dataloader


def test_len_batch_size_and_dataset() -> None:
    base = DataLoader(TensorDataset(torch.arange(10)), batch_size=4)
    dl = _prep(base)
    assert (len(dl), dl.batch_size, dl.total_batch_size) == (3, 4, 4)
    assert dl.dataset is base.dataset
    with pytest.raises(TypeError, match="without a length"):
        len(_prep(DataLoader(Stream(3), batch_size=2)))


class SizedStream(Stream):
    def __len__(self) -> int:
        return self.n


def test_an_iterable_dataset_with_a_length_gives_the_loader_one() -> None:
    # as a DataLoader over it (and Hugging Face Accelerate's prepared loader) says
    assert len(_prep(DataLoader(SizedStream(5), batch_size=2))) == 3
    assert len(_prep(DataLoader(SizedStream(5), batch_size=2, drop_last=True))) == 2
    assert len(list(_prep(DataLoader(SizedStream(5), batch_size=2)))) == 3


def test_state_dict_resumes_mid_epoch_and_later_epochs_match() -> None:
    def make(seed: int):
        return _prep(
            DataLoader(TensorDataset(torch.arange(11)), batch_size=2, shuffle=True), data_seed=seed
        )

    ref = make(3)
    epochs = [[b[0].tolist() for b in ref] for _ in range(3)]
    assert epochs[0] != epochs[1]
    run = make(3)
    for k, _ in enumerate(run):
        if k == 2:
            saved = json.loads(json.dumps(run.state_dict()))
            break
    assert saved["epoch"] == 0 and saved["batches_yielded"] == 3
    resumed = make(123)
    resumed.load_state_dict(saved)
    assert [b[0].tolist() for b in resumed] == epochs[0][3:]
    assert [b[0].tolist() for b in resumed] == epochs[1]
    # as in Hugging Face Accelerate, only an iteration that ran to its end counts as an
    # epoch: after abandoned ones, the next iteration is epoch 0 again, in its order
    for _ in run:
        break
    assert [b[0].tolist() for b in run] == epochs[0]
    assert [b[0].tolist() for b in run] == epochs[1]


def test_mid_epoch_resume_refuses_a_different_global_batch() -> None:
    dl = _prep(DataLoader(TensorDataset(torch.arange(8)), batch_size=2))
    with pytest.raises(Exception, match="same number of processes"):
        dl.load_state_dict({"epoch": 0, "batches_yielded": 1, "total_batch_size": 4})


def test_skip_first_batches_on_plain_loaders() -> None:
    mapped = skip_first_batches(DataLoader(TensorDataset(torch.arange(7)), batch_size=2), 2)
    assert isinstance(mapped, DataLoader) and len(mapped) == 2
    assert [b[0].tolist() for b in mapped] == [[4, 5], [6]]
    streamed = skip_first_batches(DataLoader(Stream(7), batch_size=2), 3)
    assert [b.tolist() for b in streamed] == [[6]]
    with pytest.raises(ValueError):
        skip_first_batches(mapped, -1)


def test_skip_first_batches_on_a_prepared_loader_is_one_shot() -> None:
    dl = _prep(DataLoader(TensorDataset(torch.arange(6)), batch_size=2))
    view = skip_first_batches(dl, 1)
    assert len(view) == 2 and len(dl) == 3
    assert [b[0].tolist() for b in view] == [[2, 3], [4, 5]]
    # as in Hugging Face Accelerate, the view counts its own epochs: the loader stays at 0
    assert dl.epoch == 0 and view.epoch == 1
    assert [b[0].tolist() for b in view] == [[0, 1], [2, 3], [4, 5]]


def test_gather_for_metrics_on_one_process_handles_objects() -> None:
    loop = LoopState()
    dl = _prep(DataLoader(TensorDataset(torch.arange(5)), batch_size=2), loop)
    got = [gather_for_metrics({"v": b[0], "tag": ["t"] * len(b[0])}, loop) for b in dl]
    assert torch.cat([g["v"] for g in got]).tolist() == list(range(5))
    assert sum(len(g["tag"]) for g in got) == 5


def test_batches_go_to_the_device_or_stay() -> None:
    placed = _prep(DataLoader(TensorDataset(torch.arange(2)), batch_size=2), device=STATE.device)
    assert next(iter(placed))[0].device == STATE.device
    left = _prep(DataLoader(TensorDataset(torch.arange(2)), batch_size=2), put_on_device=False)
    assert left.device is None


def test_no_batching_is_refused_with_a_fix() -> None:
    with pytest.raises(Exception, match="batch_size"):
        _prep(DataLoader(TensorDataset(torch.arange(4)), batch_size=None))


def test_sampler_is_the_loaders_own_without_a_seedable_one() -> None:
    """As a plain DataLoader (and Hugging Face Accelerate's prepared one): an iterable dataset's
    loader has torch's ``_InfiniteConstantSampler``; a seedable sampler, when prepare made one,
    is the loader's sampler (transformers' tests/trainer/test_trainer_data.py::
    TrainerDynamicShapesAndIterableTest::test_training_iterable_dataset)."""
    from torch.utils.data.dataloader import _InfiniteConstantSampler

    assert isinstance(_prep(DataLoader(Stream(4), batch_size=2)).sampler, _InfiniteConstantSampler)
    data = TensorDataset(torch.arange(4))
    seeded = _prep(DataLoader(data, batch_size=2, shuffle=True), use_seedable_sampler=True)
    assert type(seeded.sampler).__name__ == "SeedableRandomSampler"
    assert seeded.seed is not None
