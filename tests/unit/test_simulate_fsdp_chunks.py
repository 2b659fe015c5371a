"""The simulation's FSDP2 pieces (``overdrive.simulate.fsdp_chunks``) are the ones FSDP2's
``_chunk_with_empty`` makes: the same count, shapes, views and values, made when read."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.fsdp._fully_shard._fsdp_common import _chunk_with_empty

from overdrive.simulate.fsdp_chunks import LazyChunks


@pytest.mark.parametrize(
    ("shape", "count", "dim"),
    [((10, 3), 4, 0), ((9, 2), 4, 0), ((3, 5), 8, 0), ((0, 4), 4, 0), ((8,), 8, 0),
     ((4, 10), 4, 1), ((128256, 1), 2048, 0)],
)  # fmt: skip
def test_the_pieces_are_fsdp2s(shape: tuple[int, ...], count: int, dim: int) -> None:
    tensor = torch.arange(int(torch.Size(shape).numel()), dtype=torch.float32).reshape(shape)
    expected = _chunk_with_empty(tensor, count, dim)
    lazy = LazyChunks(tensor, count, dim)
    assert len(lazy) == len(expected) == count
    for index in (0, 1, count // 2, count - 1, -1):
        got, want = lazy[index], expected[index]
        assert got.shape == want.shape and got.stride() == want.stride()
        assert torch.equal(got, want)
        if want.numel():
            assert got.data_ptr() == want.data_ptr()  # a view of the same storage
    assert [p.shape for p in lazy[:]] == [p.shape for p in expected]
    with pytest.raises(IndexError):
        lazy[count]
