"""Test helpers the described system's test scripts import (``accelerate.test_utils``)."""

from overdrive.test_utils.testing import (
    are_the_same_tensors,
    assert_exception,
    device_count,
    require_bnb,
    require_cpu,
    require_cuda,
    require_fp16,
    require_multi_device,
    require_multi_gpu,
    require_non_cpu,
    skip,
    slow,
    torch_device,
)
from overdrive.test_utils.training import RegressionDataset, RegressionModel

__all__ = [
    "RegressionDataset",
    "RegressionModel",
    "are_the_same_tensors",
    "assert_exception",
    "device_count",
    "require_bnb",
    "require_cpu",
    "require_cuda",
    "require_fp16",
    "require_multi_device",
    "require_multi_gpu",
    "require_non_cpu",
    "skip",
    "slow",
    "torch_device",
]
