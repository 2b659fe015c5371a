"""``is_*_available`` checks that the described system's scripts call to pick code paths.

Each answers for this machine and this version of overdrive: a device overdrive cannot
run (XPU, NPU, HPU, TPU, ...) reports False even where its library is installed.
"""

from __future__ import annotations

import importlib.util
from functools import cache


@cache
def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def is_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def is_mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """bf16 works here: on CUDA when the GPU supports it, always on CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return True


def is_fp16_available() -> bool:
    """fp16 mixed precision (autocast with loss scaling) works here: on CUDA and, as
    overdrive trains it, on the CPU too."""
    return True


def is_fp8_available() -> bool:
    return is_cuda_available() and _installed("torchao")


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


def is_triton_available() -> bool:
    return _installed("triton")


def is_transformer_engine_available() -> bool:
    return _installed("transformer_engine")


def is_datasets_available() -> bool:
    return _installed("datasets")


def is_timm_available() -> bool:
    return _installed("timm")


def is_transformers_available() -> bool:
    return _installed("transformers")


def is_schedulefree_available() -> bool:
    return _installed("schedulefree")


def is_pytest_available() -> bool:
    return _installed("pytest")


def is_tensorboard_available() -> bool:
    return _installed("tensorboard") or _installed("tensorboardX")


def is_wandb_available() -> bool:
    return _installed("wandb")


def is_mlflow_available() -> bool:
    return _installed("mlflow")


def is_deepspeed_available() -> bool:
    return _installed("deepspeed")


def is_torchao_available() -> bool:
    return _installed("torchao")


def is_bnb_available() -> bool:
    return _installed("bitsandbytes")


def is_torchdata_stateful_dataloader_available() -> bool:
    return (
        _installed("torchdata")
        and importlib.util.find_spec("torchdata.stateful_dataloader") is not None
    )


def is_aim_available() -> bool:
    """aim before 4.0 (the tracker API the described system uses)."""
    if not _installed("aim"):
        return False
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


__all__ = [name for name in dir() if name.startswith("is_")]
