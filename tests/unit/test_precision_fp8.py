"""fp8: a clear error without the hardware; torchao imported only when fp8 is used."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from overdrive import ConfigError
from overdrive.config import load_settings
from overdrive.precision import FP8Precision, FP8RecipeKwargs, make_precision
from overdrive.precision import fp8 as fp8_module

CPU = torch.device("cpu")


def test_fp8_on_cpu_names_the_setting_its_source_and_the_hardware() -> None:
    environ = {"ACCELERATE_MIXED_PRECISION": "fp8", "XDG_CACHE_HOME": "/nonexistent/overdrive"}
    settings = load_settings(code={}, environ=environ)
    source = str(settings.source("mixed_precision"))
    with pytest.raises(ConfigError) as info:
        make_precision(settings["mixed_precision"], CPU, source=source)
    text = str(info.value)
    assert "mixed_precision='fp8'" in text
    assert "env ACCELERATE_MIXED_PRECISION" in text
    assert "compute capability 8.9" in text and "runs on cpu" in text
    assert "fix:" in text


def test_fp8_with_deepspeed_is_refused_once_when_settings_resolve() -> None:
    environ = {"ACCELERATE_USE_DEEPSPEED": "true", "XDG_CACHE_HOME": "/nonexistent/overdrive"}
    with pytest.raises(ConfigError) as info:
        load_settings(code={"mixed_precision": "fp8"}, environ=environ)
    text = str(info.value)
    assert "`mixed_precision` = 'fp8' (code" in text
    assert "`distributed_type` = 'DEEPSPEED' (env ACCELERATE_USE_DEEPSPEED)" in text
    assert "fix: use bf16" in text
    settings = load_settings(code={"mixed_precision": "bf16"}, environ=environ)
    assert settings["distributed_type"] == "DEEPSPEED"


_WATCH_TORCHAO = """
import sys
tried = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torchao":
            tried.append(name)
        return None
sys.meta_path.insert(0, Watch())
import torch, overdrive, overdrive.precision, overdrive.compile.model
model = overdrive.precision.make_precision("bf16", torch.device("cpu")).convert_module(
    torch.nn.Linear(16, 16)
)
print(tried)
"""


def test_torchao_is_not_imported_unless_fp8_is_used() -> None:
    # a fresh interpreter, so that no other test has imported (or faked) torchao already
    out = subprocess.run(
        [sys.executable, "-c", _WATCH_TORCHAO], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_recipe_is_validated_without_torchao() -> None:
    with pytest.raises(ConfigError, match="not a torchao float8 recipe"):
        FP8RecipeKwargs(recipe="deltawise")
    with pytest.raises(ConfigError, match="either recipe"):
        FP8RecipeKwargs(recipe="rowwise", config=object())


def _fake_torchao(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """A stand-in torchao.float8 that records how it was called (torchao needs a GPU)."""
    calls: list[dict[str, object]] = []

    class Float8LinearConfig:
        def __init__(self, recipe: str = "default") -> None:
            self.recipe = recipe

        @classmethod
        def from_recipe_name(cls, name: str) -> Float8LinearConfig:
            return cls(name)

    def convert_to_float8_training(module, *, module_filter_fn=None, config=None):  # type: ignore[no-untyped-def]
        calls.append({"config": config, "filter": module_filter_fn})
        return module

    float8 = types.ModuleType("torchao.float8")
    float8.Float8LinearConfig = Float8LinearConfig  # type: ignore[attr-defined]
    float8.convert_to_float8_training = convert_to_float8_training  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchao", types.ModuleType("torchao"))
    monkeypatch.setitem(sys.modules, "torchao.float8", float8)
    return calls


def test_fp8_converts_linears_with_the_recipe_then_autocasts_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _fake_torchao(monkeypatch)
    policy = FP8Precision(CPU, FP8RecipeKwargs(recipe="rowwise"))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 3))
    model = policy.convert_module(policy.convert_module(model))
    assert len(calls) == 1  # converted once even when prepared twice
    assert calls[0]["config"].recipe == "rowwise"  # type: ignore[union-attr]
    keep = calls[0]["filter"]
    assert keep(model[0], "0") and not keep(model[1], "1")  # type: ignore[operator]
    assert policy.autocast_dtype == torch.bfloat16
    assert model(torch.randn(2, 16)).dtype == torch.float32


def test_fp8_user_config_and_filter_are_passed_through(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_torchao(monkeypatch)
    config = object()

    def only_first(module: torch.nn.Module, fqn: str) -> bool:
        return fqn == "0"

    FP8Precision(CPU, FP8RecipeKwargs(config=config, module_filter_fn=only_first)).convert_module(
        torch.nn.Sequential(torch.nn.Linear(16, 16))
    )
    assert calls == [{"config": config, "filter": only_first}]


def test_fp8_on_a_capable_gpu_without_torchao_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fp8_module, "fp8_hardware_problem", lambda device: None)
    monkeypatch.setattr(fp8_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"overdrive\[fp8\]"):
        make_precision("fp8", torch.device("cuda"), source="code")
