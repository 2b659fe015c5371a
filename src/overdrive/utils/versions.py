"""``accelerate.utils.versions``: compare an installed library's version with a requirement."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import torch
from torch.torch_version import TorchVersion

from overdrive.utils.constants import STR_OPERATION_TO_FUNC

# TorchVersion parses and compares release strings (PEP 440) without needing `packaging`.
torch_version = TorchVersion(importlib.metadata.version("torch"))


def compare_versions(library_or_version: Any, operation: str, requirement_version: str) -> bool:
    """``library_or_version`` ``operation`` ``requirement_version``, e.g.
    ``compare_versions("torch", ">=", "2.1")``.

    ``library_or_version`` is an installed distribution's name, or a version object
    (``TorchVersion``, ``packaging.version.Version``); ``operation`` one of ``> >= == != <= <``.
    """
    if operation not in STR_OPERATION_TO_FUNC:
        raise ValueError(
            f"`operation` must be one of {list(STR_OPERATION_TO_FUNC)}, received {operation}"
        )
    if isinstance(library_or_version, TorchVersion):
        version = library_or_version
    elif isinstance(library_or_version, str):
        version = TorchVersion(importlib.metadata.version(library_or_version))
    else:
        version = TorchVersion(str(library_or_version))
    return STR_OPERATION_TO_FUNC[operation](version, requirement_version)


def is_torch_version(operation: str, version: str) -> bool:
    """The running torch's version ``operation`` ``version`` (its base release, so a
    nightly or local build compares as its release)."""
    base = str(torch.__version__).split("+")[0]
    return compare_versions(TorchVersion(base.split(".dev")[0]), operation, version)


__all__ = ["compare_versions", "is_torch_version", "torch_version"]
