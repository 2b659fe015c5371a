"""CRC-32 (zlib's) of a file from the CRCs of its pieces, which threads compute out of order.

``combine(crc_a, crc_b, len_b)`` is the CRC-32 of ``a + b`` from the CRCs of ``a`` and ``b``
(zlib's ``crc32_combine``, which Python's zlib does not offer): ``crc_a`` is shifted past
``len_b`` zero bytes by multiplying it by x^(8 * len_b) modulo the CRC polynomial, in the
bit-reflected representation zlib uses. The powers x^(2^k) are tabulated once (k < 71), so one call
costs a few dozen 32-step multiplications, whatever ``len_b``, and one for a length seen
before (most pieces of a file have the same length).
"""

from __future__ import annotations

from functools import lru_cache

_POLY = 0xEDB88320  # x^32 + x^26 + ... + 1, bit-reflected
_ONE = 1 << 31  # the polynomial 1 (x^0), bit-reflected


def _multiply(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (``a`` nonzero)."""
    product = 0
    mask = _ONE
    while True:
        if a & mask:
            product ^= b
            if not a & (mask - 1):
                return product
        mask >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _powers() -> list[int]:
    table = [_ONE >> 1]  # x^(2^0) = x
    for _ in range(70):  # bit lengths up to 2^70: any file
        table.append(_multiply(table[-1], table[-1]))
    return table


_X_2K = _powers()  # _X_2K[k] = x^(2^k)


@lru_cache(maxsize=64)  # files are written in pieces of a few sizes
def _shift(length: int) -> int:
    """x^(8 * length) modulo the CRC polynomial."""
    n, k = length, 3
    power = _ONE
    while n:
        if n & 1:
            power = _multiply(_X_2K[k], power)
        n >>= 1
        k += 1
    return power


def combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC-32 of ``a + b`` given ``crc32(a)``, ``crc32(b)`` and ``len(b)``."""
    if len_b < 0:
        raise ValueError(f"a length cannot be negative: {len_b}")
    return _multiply(_shift(len_b), crc_a) ^ crc_b
