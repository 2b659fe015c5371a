"""Test helpers Hugging Face Accelerate's test scripts import (``accelerate.test_utils``)."""

import importlib
from typing import Any

from overdrive.test_utils.testing import *  # noqa: F403  (the markers, cases and helpers)
from overdrive.test_utils.testing import __all__ as _TESTING
from overdrive.test_utils.training import RegressionDataset, RegressionModel

# The self-test scripts (``debug_launcher(test_sync.main)``) load on first use.
_SCRIPTS = ("test_script", "test_ops", "test_sync")


def __getattr__(name: str) -> Any:
    if name not in _SCRIPTS:
        raise AttributeError(f"module 'overdrive.test_utils' has no attribute {name!r}")
    module = importlib.import_module(f"overdrive.test_utils.scripts.{name}")
    globals()[name] = module
    return module


__all__ = [*_TESTING, "RegressionDataset", "RegressionModel", *_SCRIPTS]
