"""Skip markers for optional libraries and environments (the ``require_*`` decorators)."""

from __future__ import annotations

import functools
import unittest
from collections.abc import Callable
from typing import Any

from overdrive.utils import imports


def _needs(check: str | Callable[[], bool], reason: str) -> Callable[[Any], Any]:
    """A decorator skipping unless ``check`` (a callable, or a name in ``imports``) says True
    when it decorates."""

    def decorator(test: Any) -> Any:
        probe = getattr(imports, check) if isinstance(check, str) else check
        return unittest.skipUnless(probe(), reason)(test)

    return decorator


require_tensorboard = _needs("is_tensorboard_available", "test requires tensorboard")
require_wandb = _needs("is_wandb_available", "test requires wandb")
require_trackio = _needs("is_trackio_available", "test requires trackio")
require_comet_ml = _needs("is_comet_ml_available", "test requires comet_ml")
require_aim = _needs("is_aim_available", "test requires aim")
require_clearml = _needs("is_clearml_available", "test requires clearml")
require_dvclive = _needs("is_dvclive_available", "test requires dvclive")
require_swanlab = _needs("is_swanlab_available", "test requires swanlab")
require_pandas = _needs("is_pandas_available", "test requires pandas")
require_mlflow = _needs("is_mlflow_available", "test requires mlflow")
require_matplotlib = _needs("is_matplotlib_available", "test requires matplotlib")
require_datasets = _needs("is_datasets_available", "test requires the datasets library")
require_timm = _needs("is_timm_available", "test requires timm")
require_transformers = _needs("is_transformers_available", "test requires the transformers library")
require_torchdata_stateful_dataloader = _needs(
    "is_torchdata_stateful_dataloader_available",
    "test requires torchdata's StatefulDataLoader",
)
require_non_torch_xla = _needs(
    lambda: not imports.is_torch_xla_available(), "test requires an env without TorchXLA"
)

require_triton = _needs("is_triton_available", "test requires the triton library")
require_transformer_engine = _needs(
    "is_transformer_engine_available", "test requires transformers engine"
)
require_tpu = _needs(lambda: False, "test requires TPU")  # overdrive does not run on TPUs
require_cuda_or_xpu = _needs("is_cuda_available", "test requires a CUDA GPU or XPU")
require_non_hpu = _needs(lambda: True, "test requires a non-HPU")  # never an HPU here
require_fp8 = _needs("is_fp8_available", "test requires fp8 support")


def require_torch_min_version(test: Any = None, version: str | None = None) -> Any:
    """Skip unless torch is at least ``version`` (usable bare or as ``(version=...)``)."""
    if test is None:
        return functools.partial(require_torch_min_version, version=version)
    from overdrive.utils.versions import is_torch_version

    reason = f"test requires torch version >= {version}"
    return unittest.skipUnless(is_torch_version(">=", str(version)), reason)(test)


def run_first(test: Any) -> Any:
    """Mark ``test`` ``pytest.mark.order(1)`` (honoured by pytest-order) when pytest is here."""
    if not imports.is_pytest_available():
        return test
    import pytest

    return pytest.mark.order(1)(test)
