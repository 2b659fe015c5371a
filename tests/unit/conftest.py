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


@pytest.fixture
def two_process_mesh() -> Iterator[object]:
    """This process as rank 0 of 2 on PyTorch's fake process group (collectives return at
    once, with no peer: a test looks at their counts and sizes), and a 1-D CPU mesh over
    the two."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()
