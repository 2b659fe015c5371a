"""Test helpers the described system's test scripts import (``accelerate.test_utils``)."""

from overdrive.test_utils.testing import *  # noqa: F403  (the markers, cases and helpers)
from overdrive.test_utils.testing import __all__ as _TESTING
from overdrive.test_utils.training import RegressionDataset, RegressionModel

__all__ = [*_TESTING, "RegressionDataset", "RegressionModel"]
