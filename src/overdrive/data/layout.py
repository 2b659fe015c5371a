"""How one global batch ("round") is shared between processes: a pure function.

A round is what all processes consume together in one step: ``world`` consecutive user
batches (per-process batch size) or one user batch (``split_batches``). Full rounds give
rank ``r`` the ``r``-th user batch (or the ``r``-th equal slice). The epoch's last, short
round is laid out so that every process still gets exactly one batch:

* ``even_batches=True``: padded with samples from the start of the epoch until every
  process has a full batch; the padding is the tail of the round, so the first
  ``remainder`` samples of the gathered round are the real ones, in order.
* ``even_batches=False``: the real samples are shared as evenly as possible (sizes differ
  by at most one, possibly zero), nothing is duplicated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoundLayout:
    """Per-rank ``[start, stop)`` over the round's samples followed by ``padding`` repeats."""

    slices: tuple[tuple[int, int], ...]
    padding: int
    real: int  # samples in the round that are not padding
    short: bool  # the epoch's last round, laid out specially
    last: bool = False  # the epoch's last round (as known when it was read)

    def slice_for(self, rank: int) -> tuple[int, int]:
        return self.slices[rank]


def even_share(n: int, world: int, rank: int) -> tuple[int, int]:
    """Contiguous share of ``n`` items; the first ``n % world`` ranks get one more."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def layout_round(
    sizes: list[int],
    *,
    world: int,
    per_rank: int,
    split: bool,
    is_last: bool,
    even: bool,
    drop_last: bool = False,
    dispatch: bool = False,
) -> RoundLayout | None:
    """Share a round made of user batches of ``sizes`` between ``world`` ranks.

    ``per_rank`` is the batch size each rank gets from a full round. Returns None when the
    round is short and ``drop_last`` drops it. With ``dispatch`` (rank 0 reads and sends), a
    short last round is split as Hugging Face Accelerate's dispatcher splits it, whatever
    ``even`` says: ``ceil(n / world)`` samples each, the missing ones from the first round.
    """
    n = sum(sizes)
    full = world * per_rank
    short = is_last and (n < full or (not split and len(sizes) < world))
    if short and dispatch and world > 1 and not drop_last:
        each = -(-n // world)
        slices = tuple((r * each, (r + 1) * each) for r in range(world))
        return RoundLayout(slices, max(0, world * each - n), n, True, True)
    if short and drop_last:
        return None
    if not short:
        if not split and len(sizes) == world:
            bounds, start = [], 0
            for size in sizes:
                bounds.append((start, start + size))
                start += size
            return RoundLayout(tuple(bounds), 0, n, False, is_last)
        return RoundLayout(
            tuple(even_share(n, world, r) for r in range(world)), 0, n, False, is_last
        )
    if even and world > 1:
        each = max(per_rank, -(-n // world))
        slices = tuple((r * each, (r + 1) * each) for r in range(world))
        return RoundLayout(slices, world * each - n, n, True, True)
    return RoundLayout(tuple(even_share(n, world, r) for r in range(world)), 0, n, True, True)
