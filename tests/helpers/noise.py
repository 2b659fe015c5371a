"""Tolerances derived from measured arithmetic noise, not from what passed once.

A parallel layout sums the same gradients in another order than one process does, so its
numbers differ from the one-process reference by rounding. How much rounding is measured
in the same run: the test scripts train the reference again in other orders of summation
(``train_other_orders`` in ``tests/distributed/scripts/reference.py``), and a layout may
differ from the reference by a few times as much as those orders differ from each other.
Under AdamW a wrong gradient scale hides in the weights (Adam divides each gradient by its
own size) but not in the norms before clipping, which every comparison checks too.
"""

from __future__ import annotations

# Distances between valid orders of summation are samples of one noise; 3x the measured
# samples leaves room for a larger one. (PP=2 here: a 1% gradient scale error shows as 40x
# the noise in AdamW's norms, 1500x in the weights under SGD.)
NOISE_FACTOR = 3.0
FLOOR = 1e-6  # float32 rounding over a 10-step trace, where the measured orders agree exactly


def tolerance(other_orders: list[list[float]], ref: list[float]) -> float:
    """A relative tolerance for a trace compared with ``ref``: ``NOISE_FACTOR`` times the
    largest relative distance of the other orders' traces from ``ref`` (at least FLOOR)."""
    noise = max(
        (abs(a - b) / abs(b) for trace in other_orders for a, b in zip(trace, ref, strict=True)),
        default=0.0,
    )
    return max(NOISE_FACTOR * noise, FLOOR)
