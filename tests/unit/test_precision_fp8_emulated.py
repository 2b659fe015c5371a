"""fp8 through the real torchao, with its CPU emulation of float8 matmuls.

The hardware check keeps `mixed_precision="fp8"` to GPUs with compute capability 8.9+; here the
policy is built directly so the conversion and a training step run on this CPU for real.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from overdrive.precision.fp8 import FP8Precision, FP8RecipeKwargs

float8 = pytest.importorskip("torchao.float8")  # in the test extra; skips only without it


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16), nn.Linear(16, 3))


def _emulated(**recipe: object) -> FP8Precision:
    config = float8.Float8LinearConfig(emulate=True)
    return FP8Precision(torch.device("cpu"), FP8RecipeKwargs(config=config, **recipe))


def test_eligible_linears_become_float8_and_a_step_trains() -> None:
    from torchao.float8.float8_linear import Float8Linear

    policy = _emulated()
    model = policy.convert_module(_model())
    kinds = [type(m) for m in model]
    # 16 -> 3 is left alone by the default filter (float8 matmuls need multiples of 16)
    assert kinds == [Float8Linear, nn.ReLU, Float8Linear, nn.Linear]
    assert policy.convert_module(model) is model  # converting twice changes nothing

    x, y = torch.randn(8, 32), torch.randint(0, 3, (8,))
    out = model(x)
    assert out.dtype == torch.float32
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    reference = nn.functional.cross_entropy(_model()(x), y)
    # float8 e4m3 keeps 3 mantissa bits: the loss moves, but only a little.
    assert loss.item() == pytest.approx(reference.item(), rel=0.05)
    assert loss.item() != reference.item()


def test_a_custom_filter_is_honoured() -> None:
    from torchao.float8.float8_linear import Float8Linear

    policy = _emulated(module_filter_fn=lambda module, fqn: fqn != "0")
    model = policy.convert_module(_model())
    assert not isinstance(model[0], Float8Linear) and isinstance(model[2], Float8Linear)


def test_recipe_names_map_to_torchao_configs() -> None:
    policy = FP8Precision(torch.device("cpu"), FP8RecipeKwargs(recipe="rowwise"))
    config = policy.float8_config()
    assert config.cast_config_input.scaling_granularity.name == "AXISWISE"
    default = FP8Precision(torch.device("cpu")).float8_config()
    assert default.cast_config_input.scaling_granularity.name == "TENSORWISE"
