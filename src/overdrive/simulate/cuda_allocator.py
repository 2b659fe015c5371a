"""Segments as PyTorch's CUDA caching allocator reserves them, replayed from a simulated
rank's allocations and frees: what ``torch.cuda.max_memory_reserved`` would read.

The rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` with its default settings: a
request is rounded up to 512 bytes (``round_size``); requests of at most 1 MiB
come from the small pool, the rest from the large pool; each pool hands out its smallest free
block that fits (best fit), split when what remains is at least 512 bytes (small pool) or
more than 1 MiB (large pool); when none fits, a new segment is reserved (2 MiB for a small
request, 20 MiB for one under 10 MiB, else the request rounded up to 2 MiB); a freed block
merges with its free neighbours in its segment; segments are never given back, except by
``empty_cache`` (each segment with no block in use). Streams: a segment belongs to the
stream whose request reserved it, and a pool hands a stream only its own free blocks (as
the allocator does without ``record_stream``), so memory freed by one stream is not reused
by another. Torch-free.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from overdrive.simulate.device import MIN_BLOCK, cuda_block_bytes

SMALL_SIZE = 1 << 20  # kSmallSize: the largest request of the small pool
SMALL_SEGMENT = 2 << 20  # kSmallBuffer
LARGE_SEGMENT = 20 << 20  # kLargeBuffer: for requests of 1 to 10 MiB
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge


def segment_bytes(block: int) -> int:
    """The segment reserved for a block of ``block`` bytes no cached block fits
    (``get_allocation_size``)."""
    if block <= SMALL_SIZE:
        return SMALL_SEGMENT
    if block < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-block // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    stream: int = 0
    used: bool = False
    prev: _Block | None = field(default=None, repr=False)
    next: _Block | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.size, self.segment, self.offset)


class CachingAllocator:
    """The reserved and allocated bytes of one device's caching allocator, with their peaks."""

    def __init__(self) -> None:
        self._free: dict[tuple[int, bool], list[tuple[int, int, int]]] = {}  # (stream, small)
        self._blocks: dict[tuple[int, int, int], _Block] = {}
        self._live: dict[object, _Block] = {}
        self._segments: dict[int, int] = {}  # segment id -> its bytes
        self._ids = itertools.count()
        self.reserved = self.allocated = 0
        self.peak_reserved = self.peak_allocated = 0

    def malloc(self, owner: object, nbytes: int, stream: int = 0) -> None:
        """``owner`` takes a block for ``nbytes`` on ``stream`` (nothing for 0 bytes)."""
        size = cuda_block_bytes(nbytes)
        if size == 0:
            return
        small = size <= SMALL_SIZE
        block = self._take_free(stream, small, size) or self._new_segment(stream, small, size)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = _Block(block.segment, block.offset + size, remaining, small, stream)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._add_free(rest)
        block.used = True
        self._live[owner] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, owner: object) -> None:
        """``owner`` gives its block back (to the cache: the segment stays reserved)."""
        block = self._live.pop(owner, None)
        if block is None:
            return
        block.used = False
        self.allocated -= block.size
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.used:
                self._remove_free(neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        self._add_free(block)

    def empty_cache(self) -> None:
        """Give back every segment with no block in use (``torch.cuda.empty_cache``)."""
        for pool in self._free.values():
            for key in list(pool):
                block = self._blocks[key]
                if block.prev is None and block.next is None:
                    self._remove_free(block)
                    self.reserved -= self._segments.pop(block.segment)

    def reset_peaks(self) -> None:
        """Peaks from now on (``torch.cuda.reset_peak_memory_stats``)."""
        self.peak_reserved, self.peak_allocated = self.reserved, self.allocated

    def _take_free(self, stream: int, small: bool, size: int) -> _Block | None:
        pool = self._free.get((stream, small), [])
        at = bisect.bisect_left(pool, (size, -1, -1))
        if at == len(pool):
            return None
        block = self._blocks.pop(pool.pop(at))
        return block

    def _new_segment(self, stream: int, small: bool, size: int) -> _Block:
        segment = next(self._ids)
        self._segments[segment] = segment_bytes(size)
        self.reserved += self._segments[segment]
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return _Block(segment, 0, self._segments[segment], small, stream)

    def _add_free(self, block: _Block) -> None:
        bisect.insort(self._free.setdefault((block.stream, block.small), []), block.key)
        self._blocks[block.key] = block

    def _remove_free(self, block: _Block) -> None:
        pool = self._free[(block.stream, block.small)]
        del pool[bisect.bisect_left(pool, block.key)]
        del self._blocks[block.key]
