"""The model of CUDA's caching allocator behind ``--simulate_device cuda``'s reserved peak:
segments, best fit, splits and merges as ``c10/cuda/CUDACachingAllocator.cpp`` applies them,
checked against sizes computed by hand (docs/simulate.md)."""

from __future__ import annotations

import torch

from overdrive.simulate.cuda_allocator import CachingAllocator, segment_bytes
from overdrive.simulate.peak import PeakTracker

MiB = 1 << 20


def test_the_segment_a_request_reserves() -> None:
    assert segment_bytes(512) == 2 * MiB  # small: packed into 2 MiB
    assert segment_bytes(MiB) == 2 * MiB
    assert segment_bytes(MiB + 512) == 20 * MiB  # 1 to 10 MiB: a 20 MiB segment to split
    assert segment_bytes(10 * MiB - 512) == 20 * MiB
    assert segment_bytes(10 * MiB) == 10 * MiB  # from 10 MiB: its own size, to 2 MiB
    assert segment_bytes(10 * MiB + 512) == 12 * MiB


def test_small_requests_share_a_2_mib_segment() -> None:
    allocator = CachingAllocator()
    allocator.malloc("a", 400)  # a 512-byte block
    allocator.malloc("b", 4000)  # 4,096
    assert (allocator.reserved, allocator.allocated) == (2 * MiB, 512 + 4096)
    allocator.free("a")
    allocator.malloc("c", 100)  # the freed block fits: no new segment
    assert (allocator.reserved, allocator.allocated) == (2 * MiB, 512 + 4096)


def test_a_large_block_is_split_only_past_1_mib_left() -> None:
    allocator = CachingAllocator()
    allocator.malloc("a", 11 * MiB)  # its own 12 MiB segment; 1 MiB left is not split off
    assert (allocator.reserved, allocator.allocated) == (12 * MiB, 12 * MiB)
    allocator.malloc("b", 5 * MiB)  # a 20 MiB segment, split: 15 MiB stay free
    assert (allocator.reserved, allocator.allocated) == (32 * MiB, 17 * MiB)
    allocator.malloc("c", 14 * MiB)  # best fit: the 15 MiB rest; 1 MiB left, not split
    assert (allocator.reserved, allocator.allocated) == (32 * MiB, 32 * MiB)


def test_freed_neighbours_merge_and_empty_cache_gives_whole_segments_back() -> None:
    allocator = CachingAllocator()
    allocator.malloc("a", 4 * MiB)
    allocator.malloc("b", 4 * MiB)  # both in one 20 MiB segment
    allocator.free("a")
    allocator.free("b")  # merged with "a" and the rest: 20 MiB free in one block
    allocator.malloc("c", 18 * MiB)  # fits only if merged
    assert (allocator.reserved, allocator.peak_reserved) == (20 * MiB, 20 * MiB)
    allocator.malloc("d", 30 * MiB)
    allocator.free("d")
    allocator.empty_cache()  # the 30 MiB segment has nothing in use; the other keeps "c"
    assert allocator.reserved == 20 * MiB and allocator.peak_reserved == 50 * MiB
    allocator.reset_peaks()
    assert allocator.peak_reserved == 20 * MiB


def test_the_tracker_replays_a_ranks_tensors_through_it() -> None:
    tracker = PeakTracker("cuda")
    try:
        with tracker:
            kept = [torch.empty(100), torch.empty(1000), torch.empty(300_000)]
            dropped = torch.empty(5 * MiB // 4)  # 5 MiB: the rest of the 20 MiB segment
            del dropped
            kept.append(torch.empty(2 * MiB))  # 8 MiB fp32: fits in that segment again
        # a 2 MiB segment for the two small blocks, one of 20 MiB for the others
        assert tracker.reserved_peaks() == {"setup": 0, "steps": 22 * MiB}
        assert tracker.allocator is not None
        assert tracker.allocator.allocated == 512 + 4096 + 1_200_128 + 8 * MiB
        assert tracker.step_peak()["Total"] == tracker.allocator.allocated
    finally:
        tracker.close()
    on_cpu = PeakTracker()
    assert on_cpu.reserved_peaks() == {}  # sized for cpu: no allocator
    on_cpu.close()


def test_a_stream_reuses_only_its_own_freed_blocks() -> None:
    allocator = CachingAllocator()
    allocator.malloc("gathered", 12 * MiB, stream=1)  # its own 12 MiB segment, stream 1's
    allocator.free("gathered")
    allocator.malloc("activation", 12 * MiB)  # the default stream cannot take it: a new one
    assert (allocator.reserved, allocator.allocated) == (24 * MiB, 12 * MiB)
    allocator.malloc("gathered again", 12 * MiB, stream=1)  # stream 1 takes its block back
    assert (allocator.reserved, allocator.allocated) == (24 * MiB, 24 * MiB)
    allocator.free("activation")
    allocator.free("gathered again")
    allocator.empty_cache()  # both streams' unused segments go
    assert allocator.reserved == 0


def test_the_tracker_follows_the_stream_fsdp2_selects() -> None:
    """FSDP2 on a simulated rank's CPU selects its streams with ``torch.cpu.stream``: the
    tracker sized for cuda keeps their blocks apart, as a GPU's allocator does."""
    side, selects = torch.cpu.Stream(), torch.cpu.stream
    tracker = PeakTracker("cuda")
    try:
        with tracker:
            with torch.cpu.stream(side):
                gathered = torch.empty(3 * MiB)  # 12 MiB, a segment of the side stream's
            del gathered
            with torch.cpu.stream(torch.cpu.current_stream()):  # the default stream, named
                activation = torch.empty(3 * MiB)  # cannot reuse the side stream's block
            del activation
            with torch.cpu.stream(side):
                again = torch.empty(3 * MiB)  # reuses the side stream's block
            del again
        # one stream would have reused one 12 MiB segment throughout
        assert tracker.reserved_peaks() == {"setup": 0, "steps": 24 * MiB}
    finally:
        tracker.close()
    assert torch.cpu.stream is selects  # followed inside the tracker only
