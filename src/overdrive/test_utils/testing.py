"""Assertions, markers and helpers that Hugging Face Accelerate's test scripts import
(``accelerate.test_utils.testing``)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from typing import Any

import torch

from overdrive.processes.process_state import current_partial_state
from overdrive.test_utils.cases import AccelerateTestCase, MockingTestCase, TempDirTestCase
from overdrive.test_utils.devices import (
    device_count,
    get_backend,
    memory_allocated_func,
    require_cpu,
    require_cuda,
    require_cuda_or_hpu,
    require_cuda_or_xpu,
    require_fp8,
    require_fp16,
    require_mlu,
    require_mps,
    require_multi_device,
    require_multi_gpu,
    require_multi_gpu_or_xpu,
    require_multi_xpu,
    require_musa,
    require_neuron,
    require_non_cpu,
    require_non_hpu,
    require_non_torch_xla,
    require_non_xpu,
    require_npu,
    require_sdaa,
    require_single_device,
    require_single_gpu,
    require_single_xpu,
    require_tpu,
    require_xpu,
    torch_device,
)
from overdrive.test_utils.launching import (
    DEFAULT_LAUNCH_COMMAND,
    get_launch_command,
    get_torch_dist_unique_port,
    pytest_xdist_worker_id,
)
from overdrive.test_utils.requires import (
    parse_flag_from_env,
    require_aim,
    require_bnb,
    require_clearml,
    require_comet_ml,
    require_datasets,
    require_deepspeed,
    require_dvclive,
    require_fsdp2,
    require_huggingface_suite,
    require_import_timer,
    require_matplotlib,
    require_mlflow,
    require_pandas,
    require_peft,
    require_pippy,
    require_schedulefree,
    require_swanlab,
    require_tensorboard,
    require_timm,
    require_torch_min_version,
    require_torchao,
    require_torchdata_stateful_dataloader,
    require_torchvision,
    require_tp,
    require_trackers,
    require_trackio,
    require_transformer_engine,
    require_transformer_engine_mxfp8,
    require_transformers,
    require_triton,
    require_wandb,
    run_first,
    skip,
    slow,
)
from overdrive.test_utils.subprocesses import (
    RunOutput,
    SubprocessCallException,
    execute_subprocess_async,
    path_in_accelerate_package,
    run_command,
)
from overdrive.utils import imports  # noqa: F401  (kept: tests patch checks via testing.imports)
from overdrive.utils.operations import gather

__all__ = [
    # the device the tests run on, launching
    "DEFAULT_LAUNCH_COMMAND",
    "device_count",
    "get_backend",
    "get_launch_command",
    "get_torch_dist_unique_port",
    "memory_allocated_func",
    "pytest_xdist_worker_id",
    "torch_device",
    # hardware markers
    "require_cpu",
    "require_cuda",
    "require_cuda_or_hpu",
    "require_cuda_or_xpu",
    "require_fp16",
    "require_fp8",
    "require_mlu",
    "require_mps",
    "require_multi_device",
    "require_multi_gpu",
    "require_multi_gpu_or_xpu",
    "require_multi_xpu",
    "require_musa",
    "require_neuron",
    "require_non_cpu",
    "require_non_hpu",
    "require_non_torch_xla",
    "require_non_xpu",
    "require_npu",
    "require_sdaa",
    "require_single_device",
    "require_single_gpu",
    "require_single_xpu",
    "require_tpu",
    "require_xpu",
    # library, version and environment markers
    "parse_flag_from_env",
    "require_aim",
    "require_bnb",
    "require_clearml",
    "require_comet_ml",
    "require_datasets",
    "require_deepspeed",
    "require_dvclive",
    "require_fsdp2",
    "require_huggingface_suite",
    "require_import_timer",
    "require_matplotlib",
    "require_mlflow",
    "require_pandas",
    "require_peft",
    "require_pippy",
    "require_schedulefree",
    "require_swanlab",
    "require_tensorboard",
    "require_timm",
    "require_torch_min_version",
    "require_torchao",
    "require_torchdata_stateful_dataloader",
    "require_torchvision",
    "require_tp",
    "require_trackers",
    "require_trackio",
    "require_transformer_engine",
    "require_transformer_engine_mxfp8",
    "require_transformers",
    "require_triton",
    "require_wandb",
    "run_first",
    "skip",
    "slow",
    # test cases, subprocesses, assertions
    "AccelerateTestCase",
    "MockingTestCase",
    "TempDirTestCase",
    "RunOutput",
    "SubprocessCallException",
    "execute_subprocess_async",
    "path_in_accelerate_package",
    "run_command",
    "are_the_same_tensors",
    "assert_exception",
    "capture_call_output",
]


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """True when every process holds an equal ``tensor``."""
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


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``func(*args, **kwargs)`` prints to stdout."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        func(*args, **kwargs)
    return buffer.getvalue()
