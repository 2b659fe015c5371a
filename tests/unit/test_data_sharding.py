"""Sharding rules, simulated for several ranks inside one process (no process group)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, SequentialSampler

from overdrive.data.batches import batch_length, concat_batches, pad_rows, take_rows
from overdrive.data.layout import layout_round
from overdrive.data.rounds import global_rounds, local_shares
from overdrive.data.samplers import SeedableRandomSampler, ShardedBatchSampler


def _shards(n: int, world: int, batch: int, split: bool, even: bool, drop_last: bool = False):
    """Every rank's batches of indices, and each rank's final_real after the epoch."""
    per_rank = batch // world if split else batch
    out, finals = [], []
    for rank in range(world):
        sampler = ShardedBatchSampler(
            BatchSampler(SequentialSampler(range(n)), batch, drop_last),
            world=world,
            rank=rank,
            per_rank=per_rank,
            split=split,
            even=even,
            drop_last=drop_last,
        )
        batches = list(sampler)
        # A final share empty for this rank is left out (one batch fewer, even_batches off)
        assert len(batches) == len(sampler) - int(sampler.fewer)
        if sampler.fewer:
            batches.append([])
        out.append(batches)
        finals.append(sampler.final_real)
    return out, finals


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 60),
    world=st.integers(1, 4),
    per_rank=st.integers(1, 5),
    split=st.booleans(),
    even=st.booleans(),
)
def test_gathered_rounds_are_the_dataset_in_order(n, world, per_rank, split, even) -> None:
    batch = per_rank * world if split else per_rank
    shards, finals = _shards(n, world, batch, split, even)
    counts = {len(s) for s in shards}
    assert len(counts) == 1  # every rank gets the same number of batches
    gathered: list[int] = []
    rounds = counts.pop()
    for k in range(rounds):
        joined = [i for r in range(world) for i in shards[r][k]]
        if k == rounds - 1:
            assert finals[0] >= 0
            joined = joined[: finals[0]]  # what gather_for_metrics keeps
        gathered += joined
    assert gathered == list(range(n))
    for r in range(world):
        sizes = [len(b) for b in shards[r]]
        assert all(size == per_rank for size in sizes[:-1])
        if even and world > 1:
            assert sizes[-1] == per_rank  # padded with samples from the epoch's start


def test_uneven_shares_the_last_round_without_duplicates() -> None:
    shards, _ = _shards(7, 3, 2, split=False, even=False)
    assert [s[-1] for s in shards] == [[6], [], []]
    shards, _ = _shards(11, 3, 2, split=False, even=False)
    assert [s[-1] for s in shards] == [[6, 7], [8, 9], [10]]


def test_even_pads_from_the_start_of_the_epoch() -> None:
    shards, finals = _shards(7, 2, 2, split=False, even=True)
    assert [s[-1] for s in shards] == [[4, 5], [6, 0]] and finals == [3, 3]


def test_drop_last_drops_the_short_round() -> None:
    shards, _ = _shards(10, 2, 2, split=False, even=True, drop_last=True)
    assert shards == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]


def test_layout_full_round_follows_user_batches() -> None:
    lay = layout_round([3, 2], world=2, per_rank=3, split=False, is_last=False, even=True)
    assert lay is not None and lay.slices == ((0, 3), (3, 5)) and lay.padding == 0


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), world=st.integers(1, 3), split=st.booleans(), even=st.booleans())
def test_batch_level_rounds_equal_index_level_sharding(n, world, split, even) -> None:
    batch = 2 * world if split else 2
    shards, _ = _shards(n, world, batch, split, even)
    user_batches = [torch.arange(n)[i : i + batch] for i in range(0, n, batch)]
    for rank in range(world):
        rounds = global_rounds(
            user_batches, world=world, per_rank=2, split=split, even=even, drop_last=False
        )
        got = [b.tolist() for b, _ in local_shares(rounds, rank, skip=0)]
        assert got == shards[rank]
        rounds = global_rounds(
            user_batches, world=world, per_rank=2, split=split, even=even, drop_last=False
        )
        assert [b.tolist() for b, _ in local_shares(rounds, rank, skip=1)] == shards[rank][1:]


def test_seedable_sampler_is_reproducible_and_epoch_dependent() -> None:
    a, b = SeedableRandomSampler(range(20), seed=5), SeedableRandomSampler(range(20), seed=5)
    assert list(a) == list(b) and sorted(a) == list(range(20))
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first and sorted(a) == list(range(20))
    more = SeedableRandomSampler(range(4), seed=1, num_samples=10)
    assert len(list(more)) == 10 and set(more) == {0, 1, 2, 3}
    drawn = list(SeedableRandomSampler(range(3), seed=1, replacement=True, num_samples=50))
    assert len(drawn) == 50 and set(drawn) <= {0, 1, 2}


def test_batch_helpers_on_nested_batches() -> None:
    one = {"x": torch.arange(4).view(2, 2), "pair": (torch.tensor([1, 2]), ["a", "b"])}
    two = {"x": torch.arange(4, 6).view(1, 2), "pair": (torch.tensor([3]), ["c"])}
    joined = concat_batches([one, two])
    assert batch_length(joined) == 3
    assert joined["pair"][1] == ["a", "b", "c"] and isinstance(joined["pair"], tuple)
    rows = take_rows(joined, [2, 0])
    assert rows["x"].tolist() == [[4, 5], [0, 1]] and rows["pair"][1] == ["c", "a"]
    assert take_rows(joined, slice(0, 0))["x"].shape == (0, 2)
    padded = pad_rows(two, one, 3)
    assert padded["pair"][0].tolist() == [3, 1, 2, 1]
