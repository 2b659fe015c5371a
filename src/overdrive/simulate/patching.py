"""Replace an attribute for the length of a ``with`` block: how the simulation adjusts the
few places of PyTorch, DeepSpeed and overdrive that need help with fake tensors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """``owner.name`` is ``replacement`` inside the block, the original again after it."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)
