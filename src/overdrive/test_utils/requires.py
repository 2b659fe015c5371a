"""Markers that skip a test unless a library, a version or an environment flag allows it.

Each check runs when the marker decorates (as in Hugging Face Accelerate), through
``overdrive.utils.imports`` or ``overdrive.test_utils.probes``, so a test can patch either.
"""

from __future__ import annotations

import functools
import os
import unittest
from typing import Any

from overdrive.test_utils import probes
from overdrive.utils import constants, imports, versions


def _skip_unless(ok: bool, reason: str, test_case: Any) -> Any:
    return unittest.skipUnless(ok, reason)(test_case)


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The environment variable ``key`` read as a yes/no flag (``1``, ``true``, ``yes``,
    ``on``... or their opposites); ``default`` when it is not set. Any other value raises
    ValueError."""
    value = os.environ.get(key)
    if value is None:
        return default
    try:
        return probes.truth(value)
    except ValueError:
        raise ValueError(f"If set, {key} must be yes or no.") from None


def skip(test_case: Any) -> Any:
    """Skip ``test_case`` unconditionally."""
    return unittest.skip("Test was skipped")(test_case)


def slow(test_case: Any) -> Any:
    """Mark a slow test: skipped unless the environment sets ``RUN_SLOW`` to a true value."""
    return _skip_unless(parse_flag_from_env("RUN_SLOW"), "test is slow", test_case)


def run_first(test_case: Any) -> Any:
    """Mark ``test_case`` ``pytest.mark.order(1)`` (honoured by pytest-order) when pytest is
    installed; otherwise return it unchanged."""
    if not imports.is_pytest_available():
        return test_case
    import pytest

    return pytest.mark.order(1)(test_case)


def require_torch_min_version(test_case: Any = None, version: str | None = None) -> Any:
    """Skip unless torch is at least ``version``; use it bare or as ``(version=...)``."""
    if test_case is None:
        return functools.partial(require_torch_min_version, version=version)
    ok = versions.is_torch_version(">=", str(version))
    return _skip_unless(ok, f"test requires torch version >= {version}", test_case)


def require_fsdp2(test_case: Any) -> Any:
    """Skip unless torch has FSDP2 (``fully_shard``, torch 2.5 and later)."""
    ok = versions.is_torch_version(">=", "2.5.0")
    return _skip_unless(ok, "test requires FSDP2 (torch >= 2.5.0)", test_case)


def require_tp(test_case: Any) -> Any:
    """Skip unless torch and transformers are new enough for tensor parallelism (torch 2.3,
    transformers 4.52). Unlike Hugging Face Accelerate's, which raises when transformers is
    not installed, this one skips then."""
    torch_floor = constants.BETA_TP_AVAILABLE_PYTORCH_VERSION
    transformers_floor = constants.BETA_TP_AVAILABLE_TRANSFORMERS_VERSION
    ok = (
        versions.is_torch_version(">=", torch_floor)
        and imports.is_transformers_available()
        and versions.compare_versions("transformers", ">=", transformers_floor)
    )
    reason = (
        f"test requires torch version >= {torch_floor} "
        f"and transformers version >= {transformers_floor}"
    )
    return _skip_unless(ok, reason, test_case)


def require_pippy(test_case: Any) -> Any:
    """Skip unless pipeline parallelism is available (and the device is not a Gaudi 1)."""
    ok = probes.is_pippy_available() and not probes.is_habana_gaudi1()
    return _skip_unless(ok, "test requires pippy", test_case)


def require_huggingface_suite(test_case: Any) -> Any:
    """Skip unless both transformers and datasets are installed."""
    ok = imports.is_transformers_available() and imports.is_datasets_available()
    return _skip_unless(ok, "test requires the Hugging Face suite", test_case)


def require_datasets(test_case: Any) -> Any:
    """Skip unless datasets is installed."""
    ok = imports.is_datasets_available()
    return _skip_unless(ok, "test requires the datasets library", test_case)


def require_transformers(test_case: Any) -> Any:
    """Skip unless transformers is installed."""
    ok = imports.is_transformers_available()
    return _skip_unless(ok, "test requires the transformers library", test_case)


def require_timm(test_case: Any) -> Any:
    """Skip unless timm is installed."""
    return _skip_unless(imports.is_timm_available(), "test requires the timm library", test_case)


def require_torchvision(test_case: Any) -> Any:
    """Skip unless torchvision is installed."""
    ok = probes.is_torchvision_available()
    return _skip_unless(ok, "test requires the torchvision library", test_case)


def require_triton(test_case: Any) -> Any:
    """Skip unless triton is installed."""
    ok = imports.is_triton_available()
    return _skip_unless(ok, "test requires the triton library", test_case)


def require_schedulefree(test_case: Any) -> Any:
    """Skip unless schedulefree is installed."""
    ok = imports.is_schedulefree_available()
    return _skip_unless(ok, "test requires the schedulefree library", test_case)


def require_bnb(test_case: Any) -> Any:
    """Skip unless bitsandbytes is installed."""
    ok = imports.is_bnb_available()
    return _skip_unless(ok, "test requires the bitsandbytes library", test_case)


def require_peft(test_case: Any) -> Any:
    """Skip unless PEFT is installed."""
    return _skip_unless(probes.is_peft_available(), "test requires PEFT", test_case)


def require_deepspeed(test_case: Any) -> Any:
    """Skip unless DeepSpeed is installed."""
    return _skip_unless(imports.is_deepspeed_available(), "test requires DeepSpeed", test_case)


def require_torchao(test_case: Any) -> Any:
    """Skip unless torchao is installed."""
    return _skip_unless(imports.is_torchao_available(), "test requires torchao", test_case)


def require_import_timer(test_case: Any) -> Any:
    """Skip unless the import_timer package is installed."""
    ok = probes.is_import_timer_available()
    return _skip_unless(ok, "test requires tuna interpreter", test_case)


def require_transformer_engine(test_case: Any) -> Any:
    """Skip unless NVIDIA TransformerEngine is installed."""
    ok = imports.is_transformer_engine_available()
    return _skip_unless(ok, "test requires transformers engine", test_case)


def require_transformer_engine_mxfp8(test_case: Any) -> Any:
    """Skip unless TransformerEngine's MXFP8 block scaling runs on this machine."""
    ok = probes.is_transformer_engine_mxfp8_available()
    reason = "test requires transformers engine MXFP8 block scaling"
    return _skip_unless(ok, reason, test_case)


def require_torchdata_stateful_dataloader(test_case: Any) -> Any:
    """Skip unless torchdata's ``stateful_dataloader`` module is installed."""
    ok = imports.is_torchdata_stateful_dataloader_available()
    return _skip_unless(ok, "test requires torchdata.stateful_dataloader", test_case)


def require_tensorboard(test_case: Any) -> Any:
    """Skip unless tensorboard (or tensorboardX) is installed."""
    ok = imports.is_tensorboard_available()
    return _skip_unless(ok, "test requires Tensorboard", test_case)


def require_wandb(test_case: Any) -> Any:
    """Skip unless wandb is installed."""
    return _skip_unless(imports.is_wandb_available(), "test requires wandb", test_case)


def require_trackio(test_case: Any) -> Any:
    """Skip unless trackio is installed."""
    return _skip_unless(imports.is_trackio_available(), "test requires trackio", test_case)


def require_comet_ml(test_case: Any) -> Any:
    """Skip unless comet_ml is installed."""
    return _skip_unless(imports.is_comet_ml_available(), "test requires comet_ml", test_case)


def require_aim(test_case: Any) -> Any:
    """Skip unless aim (before 4.0) is installed."""
    return _skip_unless(imports.is_aim_available(), "test requires aim", test_case)


def require_clearml(test_case: Any) -> Any:
    """Skip unless clearml is installed."""
    return _skip_unless(imports.is_clearml_available(), "test requires clearml", test_case)


def require_dvclive(test_case: Any) -> Any:
    """Skip unless dvclive is installed."""
    return _skip_unless(imports.is_dvclive_available(), "test requires dvclive", test_case)


def require_swanlab(test_case: Any) -> Any:
    """Skip unless swanlab is installed."""
    return _skip_unless(imports.is_swanlab_available(), "test requires swanlab", test_case)


def require_pandas(test_case: Any) -> Any:
    """Skip unless pandas is installed."""
    return _skip_unless(imports.is_pandas_available(), "test requires pandas", test_case)


def require_mlflow(test_case: Any) -> Any:
    """Skip unless mlflow is installed."""
    return _skip_unless(imports.is_mlflow_available(), "test requires mlflow", test_case)


def require_matplotlib(test_case: Any) -> Any:
    """Skip unless matplotlib is installed."""
    ok = imports.is_matplotlib_available()
    return _skip_unless(ok, "test requires matplotlib", test_case)


def require_trackers(test_case: Any) -> Any:
    """Skip unless wandb, tensorboard, trackio or swanlab is installed and comet_ml is not."""
    any_tracker = (
        imports.is_wandb_available()
        or imports.is_tensorboard_available()
        or imports.is_trackio_available()
        or imports.is_swanlab_available()
    )
    ok = any_tracker and not imports.is_comet_ml_available()
    reason = (
        "test requires at least one tracker to be available and for `comet_ml` to not be installed"
    )
    return _skip_unless(ok, reason, test_case)
