"""``accelerate.utils.imports``: the ``is_*_available`` checks scripts call to pick code paths.

Each answers for this machine and this version of overdrive: a device overdrive cannot run
(XPU, NPU, MLU, SDAA, MUSA, HPU, TPU, Neuron) reports False even where its library is
installed. Importing this module does not import torch; the checks that need it import it
when called.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from overdrive.config.types import DistributedType
from overdrive.utils.environment import parse_flag_from_env, patch_environment

_F = TypeVar("_F", bound=Callable[..., Any])


@cache
def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _version_at_least(distribution: str, floor: str) -> bool:
    """The installed ``distribution``'s version is ``floor`` or newer."""
    # deferred: keeps overdrive.utils.imports torch-free (utils.versions loads torch)
    from overdrive.utils.versions import compare_versions

    try:
        return compare_versions(distribution, ">=", floor)
    except importlib.metadata.PackageNotFoundError:
        return False


def _flag(name: str, default: bool) -> bool:
    return parse_flag_from_env(name, default)


# Hugging Face Accelerate's switch to run plain torch where torch_xla is installed; overdrive
# never uses torch_xla, so it only records what the variable says.
USE_TORCH_XLA = os.environ.get("USE_TORCH_XLA", "True").lower() in (
    "y",
    "yes",
    "t",
    "true",
    "on",
    "1",
)


def is_torch_distributed_available() -> bool:
    """torch was built with ``torch.distributed``."""
    import torch

    return bool(torch.distributed.is_available())


def is_cuda_available() -> bool:
    """A CUDA GPU is usable; asked through NVML so CUDA itself stays uninitialised."""
    import torch

    with patch_environment(PYTORCH_NVML_BASED_CUDA_CHECK="1"):
        return torch.cuda.is_available()


def is_mps_available(min_version: str = "1.12") -> bool:
    """Apple's MPS backend is built and usable, with torch ``min_version`` or newer."""
    import torch

    # deferred: keeps overdrive.utils.imports torch-free (utils.versions loads torch)
    from overdrive.utils.versions import is_torch_version

    mps = getattr(torch.backends, "mps", None)
    return bool(
        is_torch_version(">=", min_version)
        and mps is not None
        and mps.is_available()
        and mps.is_built()
    )


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """bf16 works here: on CUDA when the GPU supports it, always on CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return True


def is_fp16_available() -> bool:
    """fp16 mixed precision can be asked for here (True, as in Hugging Face Accelerate: on a
    CPU it trains in fp32 unless the ``fp16_on_cpu`` setting asks for float16 autocast)."""
    return True


def is_fp8_available() -> bool:
    """fp8 training can run: overdrive's fp8 is torchao's, on CUDA."""
    return is_cuda_available() and is_torchao_available()


def _never(*_: object, **__: object) -> bool:
    return False


# Devices overdrive does not run on.
is_xpu_available = _never
is_npu_available = _never
is_mlu_available = _never
is_sdaa_available = _never
is_musa_available = _never
is_hpu_available = _never
is_torch_xla_available = _never
is_neuron_available = _never
is_rocm_available = _never
is_habana_gaudi1 = _never  # an HPU generation


def is_xccl_available() -> bool:
    """torch (2.7 or newer) was built with Intel's XCCL collectives."""
    # deferred: keeps overdrive.utils.imports torch-free (utils.versions loads torch)
    from overdrive.utils.versions import is_torch_version

    if not is_torch_version(">=", "2.7.0"):
        return False
    import torch.distributed.distributed_c10d as c10d

    check = getattr(c10d, "is_xccl_available", None)
    return bool(check()) if check is not None else False


def is_pippy_available() -> bool:
    """torch's pipeline parallelism (``torch.distributed.pipelining``, torch 2.4+) exists."""
    # deferred: keeps overdrive.utils.imports torch-free (utils.versions loads torch)
    from overdrive.utils.versions import is_torch_version

    return is_torch_version(">=", "2.4.0")


def is_weights_only_available() -> bool:
    """``torch.load(weights_only=True)`` takes an allow-list of globals (torch 2.4+)."""
    # deferred: keeps overdrive.utils.imports torch-free (utils.versions loads torch)
    from overdrive.utils.versions import is_torch_version

    return is_torch_version(">=", "2.4.0")


def is_numpy_available(min_version: str = "1.25.0") -> bool:
    """numpy ``min_version`` or newer is installed."""
    return _version_at_least("numpy", min_version)


def is_import_timer_available() -> bool:
    return _installed("import_timer")


def is_pynvml_available() -> bool:
    """NVML's Python bindings (the ``pynvml`` or ``nvidia-ml-py`` distribution)."""
    return _installed("pynvml")


def is_amdsmi_available() -> bool:
    return _installed("amdsmi")


def is_msamp_available() -> bool:
    return _installed("msamp")


def is_lomo_available() -> bool:
    return _installed("lomo_optim")


def is_triton_available() -> bool:
    return _installed("triton")


def is_transformer_engine_available() -> bool:
    return _installed("transformer_engine")


def is_transformer_engine_mxfp8_available() -> bool:
    """TransformerEngine is installed and this GPU runs its MXFP8 block scaling."""
    if not is_transformer_engine_available():
        return False
    from transformer_engine.pytorch.fp8 import check_mxfp8_support

    return bool(check_mxfp8_support()[0])


def is_datasets_available() -> bool:
    return _installed("datasets")


def is_peft_available() -> bool:
    return _installed("peft")


def is_timm_available() -> bool:
    return _installed("timm")


def is_torchvision_available() -> bool:
    return _installed("torchvision")


def is_transformers_available() -> bool:
    return _installed("transformers")


def is_schedulefree_available() -> bool:
    return _installed("schedulefree")


def is_pytest_available() -> bool:
    return _installed("pytest")


def is_tqdm_available() -> bool:
    return _installed("tqdm")


def is_boto3_available() -> bool:
    return _installed("boto3")


def is_sagemaker_available() -> bool:
    return _installed("sagemaker")


def is_rich_available() -> bool:
    """rich is installed and ``ACCELERATE_ENABLE_RICH`` asks for its tracebacks."""
    return _installed("rich") and _flag("ACCELERATE_ENABLE_RICH", False)


def is_tensorboard_available() -> bool:
    return _installed("tensorboard") or _installed("tensorboardX")


def is_wandb_available() -> bool:
    return _installed("wandb")


def is_mlflow_available() -> bool:
    return _installed("mlflow")


def is_deepspeed_available() -> bool:
    return _installed("deepspeed")


def is_torchao_available() -> bool:
    """torchao 0.6.1 or newer is installed."""
    return _installed("torchao") and _version_at_least("torchao", "0.6.1")


def is_bnb_available(min_version: str | None = None) -> bool:
    """bitsandbytes is installed (at ``min_version`` or newer when given)."""
    if not _installed("bitsandbytes"):
        return False
    return min_version is None or _version_at_least("bitsandbytes", min_version)


def is_4bit_bnb_available() -> bool:
    """bitsandbytes 0.39.0 or newer (its 4-bit layers)."""
    return is_bnb_available("0.39.0")


def is_8bit_bnb_available() -> bool:
    """bitsandbytes 0.37.2 or newer (its 8-bit layers)."""
    return is_bnb_available("0.37.2")


def is_bitsandbytes_multi_backend_available() -> bool:
    """bitsandbytes is installed with its multi-backend (non-CUDA) support."""
    if not is_bnb_available():
        return False
    import bitsandbytes

    return "multi_backend" in getattr(bitsandbytes, "features", set())


def is_megatron_lm_available() -> bool:
    """``ACCELERATE_USE_MEGATRON_LM`` is on and megatron-core 0.8+ with ``megatron.training``
    is installed."""
    if not _flag("ACCELERATE_USE_MEGATRON_LM", False) or not _installed("megatron"):
        return False
    try:
        return _version_at_least("megatron-core", "0.8.0") and (
            importlib.util.find_spec("megatron.training") is not None
        )
    except Exception:  # a broken install counts as absent
        return False


def is_torchdata_available() -> bool:
    return _installed("torchdata")


def is_torchdata_stateful_dataloader_available() -> bool:
    return (
        _installed("torchdata")
        and importlib.util.find_spec("torchdata.stateful_dataloader") is not None
    )


def is_aim_available() -> bool:
    """aim before 4.0 (the tracker API Hugging Face Accelerate uses)."""
    if not _installed("aim"):
        return False
    # deferred: keeps overdrive.utils.imports torch-free (utils.versions loads torch)
    from overdrive.utils.versions import compare_versions

    return compare_versions("aim", "<", "4.0.0")


def is_comet_ml_available() -> bool:
    return _installed("comet_ml")


def is_clearml_available() -> bool:
    return _installed("clearml")


def is_dvclive_available() -> bool:
    return _installed("dvclive")


def is_swanlab_available() -> bool:
    return _installed("swanlab")


def is_trackio_available() -> bool:
    return _installed("trackio")


def is_pandas_available() -> bool:
    return _installed("pandas")


def is_matplotlib_available() -> bool:
    return _installed("matplotlib")


def torchao_required(func: _F) -> _F:
    """Make ``func`` raise ImportError (with the install command) unless torchao is available."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not is_torchao_available():
            raise ImportError(
                "`torchao` is not available, please install it before calling this function "
                "via `pip install torchao`."
            )
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def deepspeed_required(func: _F) -> _F:
    """Make ``func`` raise ValueError when an ``Accelerator`` exists and is not set up for
    DeepSpeed (with no accelerator yet, it runs)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # deferred: keeps overdrive.utils.imports torch-free (process_state loads torch)
        from overdrive.processes.process_state import current_accelerator

        accelerator = current_accelerator()
        if accelerator is not None and accelerator.distributed_type != DistributedType.DEEPSPEED:
            raise ValueError(
                "DeepSpeed is not enabled, please make sure that an `Accelerator` is configured "
                "for `deepspeed` before calling this function."
            )
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = [
    *(name for name in dir() if name.startswith("is_")),
    "deepspeed_required",
    "torchao_required",
]
