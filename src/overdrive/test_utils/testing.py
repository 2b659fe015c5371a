"""Assertions and test markers that the described system's test scripts import."""

from __future__ import annotations

import contextlib
import unittest
from collections.abc import Callable, Iterator
from typing import Any

import torch

from overdrive.test_utils.cases import AccelerateTestCase, MockingTestCase, TempDirTestCase
from overdrive.test_utils.launching import (
    DEFAULT_LAUNCH_COMMAND,
    get_launch_command,
    memory_allocated_func,
)
from overdrive.test_utils.requires import (
    require_aim,
    require_clearml,
    require_comet_ml,
    require_cuda_or_xpu,
    require_datasets,
    require_dvclive,
    require_fp8,
    require_matplotlib,
    require_mlflow,
    require_non_hpu,
    require_non_torch_xla,
    require_pandas,
    require_swanlab,
    require_tensorboard,
    require_timm,
    require_torch_min_version,
    require_torchdata_stateful_dataloader,
    require_tpu,
    require_trackio,
    require_transformer_engine,
    require_transformers,
    require_triton,
    require_wandb,
    run_first,
)
from overdrive.test_utils.subprocesses import (
    RunOutput,
    SubprocessCallException,
    execute_subprocess_async,
    path_in_accelerate_package,
    run_command,
)
from overdrive.utils import imports

__all__ = [
    "require_fp8",
    "require_cuda_or_xpu",
    "require_non_hpu",
    "require_torch_min_version",
    "require_tpu",
    "require_transformer_engine",
    "require_triton",
    "capture_call_output",
    "require_datasets",
    "require_timm",
    "require_transformers",
    "require_torchdata_stateful_dataloader",
    "require_aim",
    "require_clearml",
    "require_comet_ml",
    "require_dvclive",
    "require_matplotlib",
    "require_mlflow",
    "require_non_torch_xla",
    "require_pandas",
    "require_swanlab",
    "require_tensorboard",
    "require_trackio",
    "require_wandb",
    "run_first",
    "RunOutput",
    "SubprocessCallException",
    "execute_subprocess_async",
    "path_in_accelerate_package",
    "run_command",
    "DEFAULT_LAUNCH_COMMAND",
    "AccelerateTestCase",
    "MockingTestCase",
    "TempDirTestCase",
    "are_the_same_tensors",
    "assert_exception",
    "device_count",
    "get_launch_command",
    "memory_allocated_func",
    "require_bnb",
    "require_cpu",
    "require_cuda",
    "require_fp16",
    "require_huggingface_suite",
    "require_multi_device",
    "require_multi_gpu",
    "require_non_cpu",
    "skip",
    "slow",
    "torch_device",
]

torch_device = "cuda" if torch.cuda.is_available() else "cpu"
device_count = torch.cuda.device_count() if torch.cuda.is_available() else 1


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """True when every process holds an equal ``tensor``."""
    from overdrive.compat.state_views import current_partial_state
    from overdrive.utils.operations import gather

    state = current_partial_state()
    mine = tensor[None].clone().to(state.device)
    everyone = gather(mine).cpu()
    return all(torch.equal(row, mine[0].cpu()) for row in everyone)


@contextlib.contextmanager
def assert_exception(
    exception_class: type[BaseException], msg: str | None = None
) -> Iterator[None]:
    """The block must raise ``exception_class`` (with ``msg`` in its text when given)."""
    try:
        yield
    except Exception as exc:
        assert isinstance(exc, exception_class), (
            f"expected {exception_class.__name__}, got {type(exc).__name__}: {exc}"
        )
        if msg is not None:
            assert msg in str(exc), f"expected {msg!r} in the message, got {str(exc)!r}"
        return
    raise AssertionError(f"expected {exception_class.__name__}, but nothing was raised")


def _skip_unless(condition: bool, reason: str) -> Callable[[Any], Any]:
    return unittest.skipUnless(condition, reason)


def require_cuda(test: Any) -> Any:
    return _skip_unless(torch.cuda.is_available(), "test requires a CUDA GPU")(test)


def require_cpu(test: Any) -> Any:
    return _skip_unless(torch_device == "cpu", "test requires only a CPU")(test)


def require_non_cpu(test: Any) -> Any:
    return _skip_unless(torch_device != "cpu", "test requires a GPU")(test)


def require_multi_device(test: Any) -> Any:
    return _skip_unless(device_count > 1, "test requires several GPUs")(test)


require_multi_gpu = require_multi_device


def require_bnb(test: Any) -> Any:
    return _skip_unless(imports.is_bnb_available(), "test requires bitsandbytes")(test)


def require_huggingface_suite(test: Any) -> Any:
    ok = imports.is_transformers_available() and imports.is_datasets_available()
    return _skip_unless(ok, "test requires transformers and datasets")(test)


def require_fp16(test: Any) -> Any:
    return _skip_unless(imports.is_fp16_available(), "test requires fp16 support")(test)


def slow(test: Any) -> Any:
    return test


def skip(test: Any) -> Any:
    return unittest.skip("skipped")(test)


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``func(*args, **kwargs)`` prints to stdout."""
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        func(*args, **kwargs)
    return buffer.getvalue()
