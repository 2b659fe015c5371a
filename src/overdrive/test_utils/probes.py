"""Availability checks the ``require_*`` markers need and ``overdrive.utils.imports`` lacks.

Each one answers the way Hugging Face Accelerate's check of the same name does; the markers
look them up on this module when they decorate, so a test can patch them here.
"""

from __future__ import annotations

import importlib.util

import torch

from overdrive.precision.fp8 import MIN_CAPABILITY
from overdrive.utils import imports
from overdrive.utils.versions import is_torch_version

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def truth(value: str) -> bool:
    """``yes``/``true``/``on``/``1``... as True, ``no``/``false``/``off``/``0``... as False
    (any case); anything else raises ValueError."""
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"invalid truth value {value}")


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def is_peft_available() -> bool:
    """The ``peft`` package is installed."""
    return _installed("peft")


def is_torchvision_available() -> bool:
    """The ``torchvision`` package is installed."""
    return _installed("torchvision")


def is_import_timer_available() -> bool:
    """The ``import_timer`` package (``python -X importtime`` reports, parsed) is installed."""
    return _installed("import_timer")


def is_pippy_available() -> bool:
    """Pipeline parallelism through ``torch.distributed.pipelining`` (torch 2.4 and later)."""
    return is_torch_version(">=", "2.4.0")


def is_transformer_engine_mxfp8_available() -> bool:
    """TransformerEngine is installed and reports that this machine supports MXFP8 scaling."""
    if not _installed("transformer_engine"):
        return False
    from transformer_engine.pytorch.fp8 import check_mxfp8_support

    return bool(check_mxfp8_support()[0])


def is_habana_gaudi1() -> bool:
    """The HPU present is a first-generation Gaudi (no fp8, no pipelining)."""
    if not imports.is_hpu_available():
        return False
    import habana_frameworks.torch.utils.experimental as htexp

    return bool(htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi)


def cuda_supports_fp8() -> bool:
    """The current CUDA GPU has the compute capability float8 matmuls need."""
    return tuple(torch.cuda.get_device_capability()) >= MIN_CAPABILITY


def is_mps_available(min_version: str = "1.12") -> bool:
    """Apple's MPS backend is built and usable, under torch ``min_version`` or later."""
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not is_torch_version(">=", min_version):
        return False
    return bool(mps.is_available() and mps.is_built())
