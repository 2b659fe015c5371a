"""Hugging Face Accelerate's shard and loader classes built by hand, for a world the code
names: every sample reaches exactly one process per round, and the last round is completed
from the start of the data (even_batches) or dropped (drop_last)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler

from overdrive.data_loader import (
    BatchSamplerShard,
    DataLoaderShard,
    DataLoaderStateMixin,
    IterableDatasetShard,
    SkipDataLoader,
)


def _shards(n: int, total: int, size: int, **kw: bool) -> list[list[list[int]]]:
    drop = bool(kw.pop("drop_last", False))
    return [
        list(BatchSamplerShard(BatchSampler(range(total), size, drop), n, i, **kw))
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("total", [2, 20, 21, 24, 25])
def test_even_batches_give_every_process_whole_batches_and_lose_no_sample(
    n: int, total: int
) -> None:
    shards = _shards(n, total, 3)
    assert len({len(s) for s in shards}) == 1  # as many batches on every process
    assert all(len(b) == 3 for s in shards for b in s)
    seen = [x for r in range(len(shards[0])) for s in shards for x in s[r]]
    assert seen[:total] == list(range(total))  # in order, then filled from the start
    assert seen[total:] == [x % total for x in range(len(seen) - total)]
    for i, shard in enumerate(shards):
        assert len(BatchSamplerShard(BatchSampler(range(total), 3, False), n, i)) == len(shard)


def test_drop_last_drops_the_incomplete_round_and_uneven_keeps_the_rest() -> None:
    assert _shards(2, 20, 3, drop_last=True) == [
        [[0, 1, 2], [6, 7, 8], [12, 13, 14]],
        [[3, 4, 5], [9, 10, 11], [15, 16, 17]],
    ]
    assert _shards(2, 20, 3, even_batches=False)[0][-1] == [18, 19]
    split = _shards(2, 22, 4, split_batches=True)
    assert split[0][-1] == [20, 21] and split[1][-1] == [0, 1]
    with pytest.raises(ValueError, match="round multiple"):
        BatchSamplerShard(BatchSampler(range(8), 3, False), 2, 0, split_batches=True)


def test_iterable_shards_interleave_back_into_the_data() -> None:
    data = list(range(11))
    shards = [list(IterableDatasetShard(data, batch_size=2, num_processes=2, process_index=i))
              for i in range(2)]  # fmt: skip
    woven = [x for r in range(0, len(shards[0]), 2) for s in shards for x in s[r : r + 2]]
    assert woven == (data + data)[: len(woven)] and len(woven) == 12


def test_loaders_built_by_hand_know_their_last_batch_and_skip() -> None:
    loader = DataLoaderShard(list(range(16)), batch_size=4)
    assert isinstance(loader, DataLoaderStateMixin)
    for _ in range(2):  # each epoch
        ends = [loader.end_of_dataloader for _ in loader]
        assert ends == [False, False, False, True]
    skipped = SkipDataLoader(list(range(16)), batch_size=4, skip_batches=2)
    assert [b.tolist() for b in skipped] == [[8, 9, 10, 11], [12, 13, 14, 15]]
    assert isinstance(loader.base_dataloader, torch.utils.data.DataLoader)


def test_a_loader_by_hand_keeps_its_epoch_when_skipping() -> None:
    from overdrive.data_loader import SeedableRandomSampler, skip_first_batches

    def loader_at(epoch: int) -> tuple[DataLoaderShard, SeedableRandomSampler]:
        sampler = SeedableRandomSampler(list(range(16)))
        made = DataLoaderShard(list(range(16)), batch_sampler=BatchSampler(sampler, 4, False))
        made.set_epoch(epoch)
        return made, sampler

    whole, _ = loader_at(3)
    order = [b.tolist() for b in whole]
    loader, sampler = loader_at(3)
    skipped = skip_first_batches(loader, 2)
    assert (skipped.iteration, sampler.epoch) == (3, 3)
    assert [b.tolist() for b in skipped] == order[2:]
