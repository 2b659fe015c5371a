"""The mixed_precision setting resolves by precedence and picks the matching policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from overdrive import ConfigError
from overdrive.config import load_settings
from overdrive.precision import (
    AutocastPrecision,
    DelegatedPrecision,
    ScaledPrecision,
    make_precision,
)

CPU = torch.device("cpu")


def _resolve(
    tmp_path: Path, *, file: str | None, env: str | None, code: str | None
) -> tuple[str, str]:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"mixed_precision: {file}\n" if file else "debug: false\n")
    settings = load_settings(
        code={"mixed_precision": code} if code else {},
        config_file=cfg,
        environ={"ACCELERATE_MIXED_PRECISION": env} if env else {},
    )
    return settings["mixed_precision"], str(settings.source("mixed_precision"))


def test_code_beats_env_beats_file(tmp_path: Path) -> None:
    assert _resolve(tmp_path, file="fp16", env=None, code=None)[0] == "fp16"
    value, source = _resolve(tmp_path, file="fp16", env=None, code=None)
    assert source.startswith("file") and "cfg.yaml" in source
    assert _resolve(tmp_path, file="fp16", env="bf16", code=None) == (
        "bf16",
        "env ACCELERATE_MIXED_PRECISION",
    )
    value, source = _resolve(tmp_path, file="fp16", env="bf16", code="no")
    assert (value, source.split()[0]) == ("no", "code")
    assert _resolve(tmp_path, file=None, env=None, code=None) == ("no", "default")


@pytest.mark.parametrize(
    ("mode", "kind", "dtype"),
    [("bf16", AutocastPrecision, torch.bfloat16), ("fp16", ScaledPrecision, torch.float16)],
)
def test_resolved_value_builds_the_policy(
    tmp_path: Path, mode: str, kind: type, dtype: torch.dtype
) -> None:
    value, source = _resolve(tmp_path, file="no", env=mode, code=None)
    policy = make_precision(value, CPU, fp16_on_cpu=True, source=source)
    assert type(policy) is kind and policy.name == mode and policy.autocast_dtype == dtype


def test_deepspeed_runs_its_own_mixed_precision() -> None:
    policy = make_precision("fp16", CPU, fp16_on_cpu=True, precision_owner="DeepSpeed")
    assert isinstance(policy, DelegatedPrecision) and policy.name == "fp16"
    assert policy.scaler is None


def test_fsdp_fp16_uses_the_sharded_scaler() -> None:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    policy = make_precision("fp16", CPU, fp16_on_cpu=True, sharded_grads=True)
    assert isinstance(policy.scaler, ShardedGradScaler)


def test_unknown_value_names_its_source() -> None:
    with pytest.raises(ConfigError, match=r"'fp4' \(from code Accelerator"):
        make_precision("fp4", CPU, source="code Accelerator(mixed_precision=...)")
