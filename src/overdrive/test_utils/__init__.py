"""Test helpers the described system's test scripts import (``accelerate.test_utils``)."""

from overdrive.test_utils.cases import AccelerateTestCase, MockingTestCase, TempDirTestCase
from overdrive.test_utils.launching import (
    DEFAULT_LAUNCH_COMMAND,
    get_launch_command,
    memory_allocated_func,
)
from overdrive.test_utils.testing import (
    are_the_same_tensors,
    assert_exception,
    device_count,
    require_bnb,
    require_cpu,
    require_cuda,
    require_fp16,
    require_huggingface_suite,
    require_multi_device,
    require_multi_gpu,
    require_non_cpu,
    skip,
    slow,
    torch_device,
)
from overdrive.test_utils.training import RegressionDataset, RegressionModel

__all__ = [
    "DEFAULT_LAUNCH_COMMAND",
    "AccelerateTestCase",
    "MockingTestCase",
    "TempDirTestCase",
    "get_launch_command",
    "memory_allocated_func",
    "require_huggingface_suite",
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
