"""CRC-32 of a file from its pieces' CRCs: what zlib.crc32 of the whole gives."""

from __future__ import annotations

import mmap
import os
import random
import zlib

import pytest

from overdrive.checkpoint.crc import combine
from overdrive.checkpoint.errors import CheckpointError


def test_combined_crcs_equal_the_crc_of_the_concatenation() -> None:
    rng = random.Random(0)
    for _ in range(300):
        a = rng.randbytes(rng.randint(0, 2000))
        b = rng.randbytes(rng.choice([0, 1, 7, rng.randint(0, 5000)]))
        assert combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_many_pieces_combine_in_order() -> None:
    rng = random.Random(1)
    pieces = [rng.randbytes(rng.choice([4096, 4096, 333])) for _ in range(50)]
    pieces.append(bytes(3 << 20))  # a long piece: the shift is not a short loop
    total = 0
    for piece in pieces:
        total = combine(total, zlib.crc32(piece), len(piece))
    assert total == zlib.crc32(b"".join(pieces))
    swapped = 0
    for piece in [pieces[1], pieces[0], *pieces[2:]]:
        swapped = combine(swapped, zlib.crc32(piece), len(piece))
    assert swapped != total  # the order matters


def test_a_negative_length_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        combine(1, 2, -1)


def test_a_file_hashed_in_pieces_on_threads_has_the_crc_of_its_bytes(tmp_path, monkeypatch) -> None:
    from overdrive.checkpoint import integrity, io_threads

    monkeypatch.setattr(integrity, "_CHUNK", mmap.ALLOCATIONGRANULARITY)  # many pieces
    monkeypatch.setattr(io_threads, "io_threads", lambda: 3)
    files = {}
    for name, size in (("a", 0), ("b", 5), ("c", 3 * mmap.ALLOCATIONGRANULARITY + 17)):
        data = os.urandom(size)
        (tmp_path / name).write_bytes(data)
        files[tmp_path / name] = {"size": size, "crc32": f"{zlib.crc32(data):08x}"}
    assert integrity.checksums(files) == files
    integrity.verify(tmp_path, {p.name: r for p, r in files.items()})  # passes
    damaged = bytearray((tmp_path / "c").read_bytes())
    damaged[2 * mmap.ALLOCATIONGRANULARITY + 3] ^= 1  # one bit, in the third piece
    (tmp_path / "c").write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError, match="does not hold the bytes that were written"):
        integrity.verify(tmp_path, {p.name: r for p, r in files.items()})
