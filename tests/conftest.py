"""Fixtures every test shares."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


def _group_open() -> bool:
    dist = sys.modules.get("torch.distributed")  # torch only if a test imported it
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


@pytest.fixture(autouse=True)
def _no_process_group_outlives_its_test() -> Iterator[None]:
    """A process group a test opened (DeepSpeed's ``init_distributed`` inside an
    ``Accelerator``, say) is closed after it: the next test starts as a fresh process would,
    whichever tests ran before it in this worker (``make test`` spreads them over two)."""
    opened_before = _group_open()
    yield
    if _group_open() and not opened_before:
        sys.modules["torch.distributed"].destroy_process_group()
