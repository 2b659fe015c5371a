"""FSDP2 cuts each parameter into one piece per rank of its data-parallel group
(``_chunk_with_empty``) and keeps two of them: this rank's and the first (the padded size).
On fake tensors each piece costs about 0.1 ms to make, which at a data-parallel degree of
thousands costs more than the rest of the simulation; here a piece is made only when FSDP2
reads it, the same view ``torch.chunk`` gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import torch


class LazyChunks(Sequence[torch.Tensor]):
    """``torch.chunk(tensor, count, dim)`` padded with empty tensors to ``count`` pieces, each
    made when indexed."""

    def __init__(self, tensor: torch.Tensor, count: int, dim: int) -> None:
        self._tensor, self._count, self._dim = tensor, count, dim

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> torch.Tensor: ...

    @overload
    def __getitem__(self, index: slice) -> list[torch.Tensor]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(f"piece {index} of {self._count}")
        size = self._tensor.size(self._dim)
        step = -(-size // self._count)  # torch.chunk's piece: the size over the count, rounded up
        start = index * step
        if size == 0:  # torch.chunk gives ``count`` empty pieces of the tensor's shape
            return self._tensor.narrow(self._dim, 0, 0)
        if start >= size:
            return self._tensor.new_empty(0)  # as _chunk_with_empty pads: chunks[0].new_empty(0)
        return self._tensor.narrow(self._dim, start, min(step, size - start))


def lazy_chunk_with_empty(tensor: torch.Tensor, num_chunks: int, dim: int) -> LazyChunks:
    """FSDP2's ``_chunk_with_empty``, its pieces made when read."""
    return LazyChunks(tensor, num_chunks, dim)
