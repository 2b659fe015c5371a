"""Test helpers Hugging Face Accelerate's test scripts import (``accelerate.test_utils``)."""

from overdrive.lazy.attributes import lazy_getattr
from overdrive.test_utils.testing import *  # noqa: F403  (the markers, cases and helpers)
from overdrive.test_utils.testing import __all__ as _TESTING
from overdrive.test_utils.training import RegressionDataset, RegressionModel

# The self-test scripts (``debug_launcher(test_sync.main)``) load on first use.
_SCRIPTS = ("test_script", "test_ops", "test_sync")


__getattr__ = lazy_getattr(
    __name__, {name: f"overdrive.test_utils.scripts.{name}" for name in _SCRIPTS}
)


__all__ = [*_TESTING, "RegressionDataset", "RegressionModel", *_SCRIPTS]
