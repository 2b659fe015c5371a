"""A hand-built loader left mid-epoch ends its worker processes when its last reference goes,
as a DataLoader does: it is in no reference cycle, so the garbage collector (which closes
the worker queues before the workers are told to stop, leaving each to be killed after 5 s)
never has to collect it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from overdrive.data_loader import DataLoaderDispatcher, DataLoaderShard, SkipDataLoader

pytest.importorskip("torchdata.stateful_dataloader")


@pytest.fixture
def no_garbage_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("cls", [DataLoaderShard, SkipDataLoader, DataLoaderDispatcher])
@pytest.mark.parametrize("stateful", [False, True])
def test_a_loader_left_mid_epoch_goes_with_its_last_reference(
    no_garbage_collector: None, cls: type, stateful: bool
) -> None:
    loader = cls(list(range(40)), batch_size=4, use_stateful_dataloader=stateful)
    for _, _batch in zip(range(3), loader):
        pass
    gone = weakref.ref(loader)
    del loader
    assert gone() is None


def test_its_worker_processes_end_with_it(no_garbage_collector: None) -> None:
    loader = DataLoaderShard(
        list(range(40)), batch_size=4, num_workers=2, use_stateful_dataloader=True
    )
    for _, _batch in zip(range(3), loader):
        pass
    workers = list(loader._iterator._workers)
    assert all(w.is_alive() for w in workers)
    del loader
    assert not any(w.is_alive() for w in workers)

    twin = DataLoaderShard(list(range(8)), batch_size=4, use_stateful_dataloader=True)
    skipping = twin.skipping(1)
    assert skipping.base_dataloader is skipping and twin.base_dataloader is twin


@pytest.mark.parametrize("cls", [DataLoaderShard, SkipDataLoader, DataLoaderDispatcher])
def test_base_dataloader_is_an_instance_attribute_as_in_accelerate(cls: type) -> None:
    with pytest.raises(AttributeError):
        _ = cls.base_dataloader
    assert not hasattr(cls, "base_dataloader")
