"""IterableDatasetShard: Hugging Face Accelerate's length, and a position a
StatefulDataLoader can save and continue from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset

from overdrive.data.shards_by_hand import IterableDatasetShard


class Counting(IterableDataset[int]):
    """0..n-1, counting reads; with ``stateful`` it continues from its saved position."""

    def __init__(self, n: int, stateful: bool) -> None:
        self.n, self.pos, self.reads = n, 0, 0
        if stateful:
            self.state_dict = lambda: {"pos": self.pos}
            self.load_state_dict = lambda s: setattr(self, "pos", s["pos"])

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        while self.pos < self.n:
            self.reads += 1
            self.pos += 1
            yield self.pos - 1
        self.pos = 0


def test_length_groups_batch_size_times_processes_even_when_splitting() -> None:
    # Hugging Face Accelerate's count: ceil(10 / (4 * 2)) * 4, split_batches or not
    for split in (False, True):
        assert len(IterableDatasetShard(Counting(10, False), 4, False, 2, 0, split)) == 8
    assert len(IterableDatasetShard(Counting(10, False), 4, True, 2, 1, True)) == 4


def _resumed(stateful: bool) -> tuple[list[int], list[int], int]:
    whole = list(IterableDatasetShard(Counting(11, stateful), 2, False, 2, 1))
    data = Counting(11, stateful)
    shard = IterableDatasetShard(data, 2, False, 2, 1)
    it = iter(shard)
    head = [next(it), next(it), next(it), next(it)]  # two global batches of 4
    saved: dict[str, Any] = shard.state_dict()
    data.reads = 0
    again = IterableDatasetShard(data if stateful else Counting(11, False), 2, False, 2, 1)
    again.load_state_dict(saved)
    rest = list(again)
    reads = data.reads if stateful else again.dataset.reads  # type: ignore[attr-defined]
    assert head + rest == whole
    return whole, rest, reads


def test_a_saved_position_continues_where_it_was_and_completes_from_the_first_batch() -> None:
    whole, rest, _ = _resumed(stateful=False)
    # process 1's slice of [8, 9, 10] completed from the first global batch [0, 1, 2, 3]
    assert whole == [2, 3, 6, 7, 10, 0] and rest == [10, 0]


def test_a_dataset_with_its_own_state_is_not_read_again() -> None:
    _, _, reads_stateful = _resumed(stateful=True)
    _, _, reads_plain = _resumed(stateful=False)
    assert reads_stateful == 3  # 8, 9, 10
    assert reads_plain == 11  # read again from the start
