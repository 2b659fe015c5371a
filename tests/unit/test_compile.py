"""dynamo settings compile the model with torch.compile; "no" leaves it alone."""

from __future__ import annotations

import copy

import pytest
import torch

from overdrive import ConfigError
from overdrive.compile.model import compile_kwargs, compile_model, uncompiled
from overdrive.config import Settings, load_settings


def _settings(code: dict[str, object] | None = None, env: dict[str, str] | None = None) -> Settings:
    # a cache directory that does not exist: no default config file from this machine
    environ = {"XDG_CACHE_HOME": "/nonexistent/overdrive-test", **(env or {})}
    return load_settings(code=code or {}, environ=environ)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 1))


def _train(model: torch.nn.Module, steps: int = 4) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_no_backend_returns_the_model_unchanged() -> None:
    model = _model()
    assert compile_model(model, _settings()) is model


def test_backend_compiles_and_trains_like_eager() -> None:
    eager = _model()
    original = copy.deepcopy(eager)
    compiled = compile_model(original, _settings(env={"ACCELERATE_DYNAMO_BACKEND": "aot_eager"}))
    from torch._dynamo.eval_frame import OptimizedModule

    assert isinstance(compiled, OptimizedModule)
    assert uncompiled(compiled) is original
    assert uncompiled(eager) is eager
    # aot_eager runs the same aten ops as eager; only op ordering may differ.
    torch.testing.assert_close(_train(compiled), _train(eager), rtol=1e-5, atol=1e-6)
    for a, b in zip(original.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_settings_become_torch_compile_arguments() -> None:
    kwargs = compile_kwargs(
        _settings(
            code={
                "dynamo_backend": "inductor",
                "dynamo_mode": "max-autotune",
                "dynamo_use_fullgraph": True,
                "dynamo_use_dynamic": False,
            }
        )
    )
    assert kwargs == {
        "backend": "inductor",
        "mode": "max-autotune",
        "fullgraph": True,
        "dynamic": False,
    }
    # dynamic left unset means torch's automatic choice, not "never dynamic"
    assert compile_kwargs(_settings(code={"dynamo_backend": "eager"})) == {
        "backend": "eager",
        "fullgraph": False,
        "dynamic": None,
    }


def test_mode_without_inductor_is_an_error() -> None:
    settings = _settings(
        code={"dynamo_backend": "eager"}, env={"ACCELERATE_DYNAMO_MODE": "max-autotune"}
    )
    with pytest.raises(
        ConfigError, match="env ACCELERATE_DYNAMO_MODE.*only applies to the inductor"
    ):
        compile_kwargs(settings)


def test_unavailable_backend_is_an_error() -> None:
    with pytest.raises(ConfigError, match="dynamo_backend='ipex'.*not available"):
        compile_kwargs(_settings(code={"dynamo_backend": "ipex"}))
