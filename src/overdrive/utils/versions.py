"""``accelerate.utils.versions``: compare an installed library's version with a requirement."""

from __future__ import annotations

import importlib.metadata
import operator
from collections.abc import Callable

import torch
from torch.torch_version import TorchVersion

# TorchVersion parses and compares release strings (PEP 440) without needing `packaging`.
_OPERATIONS: dict[str, Callable[[TorchVersion, str], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}


def compare_versions(library_or_version: str, operation: str, requirement: str) -> bool:
    """``library_or_version`` (an installed package's name, or a ``TorchVersion``) ``operation``
    ``requirement``, e.g. ``compare_versions("torch", ">=", "2.1")``."""
    if operation not in _OPERATIONS:
        raise ValueError(f"operation {operation!r} is not one of {', '.join(_OPERATIONS)}")
    if not isinstance(library_or_version, TorchVersion):
        library_or_version = TorchVersion(importlib.metadata.version(library_or_version))
    return _OPERATIONS[operation](library_or_version, requirement)


def is_torch_version(operation: str, version: str) -> bool:
    """The running torch's version ``operation`` ``version`` (its base release, so a
    nightly or local build compares as its release)."""
    base = str(torch.__version__).split("+")[0]
    return compare_versions(TorchVersion(base.split(".dev")[0]), operation, version)


__all__ = ["compare_versions", "is_torch_version"]
