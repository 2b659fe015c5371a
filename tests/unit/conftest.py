"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist


@pytest.fixture
def one_process_group(tmp_path: Path) -> Iterator[None]:
    """A gloo process group of one process (this one) for the test, unless one is open."""
    owned = not dist.is_initialized()
    if owned:
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        if owned:
            dist.destroy_process_group()
