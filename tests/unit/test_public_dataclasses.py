"""Accelerate's kwargs dataclasses: defaults as documented (Hugging Face Accelerate docs,
Reference > Kwargs handlers), validation with a fix, cheap import."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from overdrive import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    DistributedType,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    MegatronLMPlugin,
    ProjectConfiguration,
)
from overdrive.errors import ConfigError


def test_documented_defaults() -> None:
    scaler = GradScalerKwargs()
    assert (scaler.init_scale, scaler.growth_factor, scaler.backoff_factor) == (65536.0, 2.0, 0.5)
    assert (scaler.growth_interval, scaler.enabled) == (2000, True)
    assert AutocastKwargs().enabled is True and AutocastKwargs().cache_enabled is None
    ddp = DistributedDataParallelKwargs()
    assert (ddp.bucket_cap_mb, ddp.find_unused_parameters) == (25, False)
    assert (ddp.gradient_as_bucket_view, ddp.static_graph) == (False, False)


def test_to_kwargs_lists_only_changed_fields() -> None:
    assert GradScalerKwargs(init_scale=1024.0, growth_interval=10).to_kwargs() == {
        "init_scale": 1024.0,
        "growth_interval": 10,
    }
    assert DistributedDataParallelKwargs().to_kwargs() == {}


@pytest.mark.parametrize(
    "kwargs",
    [{"init_scale": 0.0}, {"growth_factor": 1.0}, {"backoff_factor": 1.5}, {"growth_interval": 0}],
)
def test_grad_scaler_kwargs_reject_nonsense(kwargs: dict) -> None:
    with pytest.raises(ConfigError, match="fix:"):
        GradScalerKwargs(**kwargs)


def test_init_process_group_kwargs() -> None:
    assert InitProcessGroupKwargs(timeout=timedelta(seconds=30)).timeout == timedelta(seconds=30)
    with pytest.raises(ConfigError, match="timedelta"):
        InitProcessGroupKwargs(timeout=30)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="gloo"):
        InitProcessGroupKwargs(backend="glooo")


def test_plugins_report_only_what_was_set() -> None:
    assert MegatronLMPlugin(tp_degree=2).to_settings() == {
        "use_megatron_lm": True,
        "megatron_lm_config.tp_degree": 2,
    }
    assert ProjectConfiguration(project_dir="out", total_limit=3).to_settings() == {
        "project_dir": "out",
        "total_limit": 3,
    }


def test_distributed_type_values() -> None:
    assert [t.value for t in DistributedType] == [
        "NO",
        "MULTI_CPU",
        "MULTI_GPU",
        "DEEPSPEED",
        "FSDP",
        "MEGATRON_LM",
        "XLA",
        "MULTI_NPU",
        "MULTI_MLU",
        "MULTI_SDAA",
        "MULTI_MUSA",
        "MULTI_XPU",
        "MULTI_HPU",
        "MULTI_NEURON",
    ]
    from overdrive.utils import DistributedType as FromUtils

    assert FromUtils is DistributedType


def test_import_is_cheap() -> None:
    code = (
        "import sys, overdrive;"
        "heavy = [m for m in ('deepspeed', 'tensorboard', 'mlflow', 'wandb', 'transformers',"
        " 'torchao', 'questionary', 'sklearn', 'torch') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""  # torch too: the CLI answers config questions without it


def test_lazy_names_resolve() -> None:
    import overdrive

    for name in ("Accelerator", "PartialState", "FP8RecipeKwargs", "get_logger", "set_seed"):
        assert getattr(overdrive, name).__name__ == name
    with pytest.raises(AttributeError):
        overdrive.NotAName  # noqa: B018
