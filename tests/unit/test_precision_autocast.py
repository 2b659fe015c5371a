"""bf16/fp16 autocast policy: half-precision matmuls inside the forward, fp32 outside."""

from __future__ import annotations

import collections
import inspect
import pickle

import pytest
import torch

from overdrive import AutocastKwargs
from overdrive.precision import AutocastPrecision, Precision, make_precision
from overdrive.precision.outputs import outputs_to_fp32

CPU = torch.device("cpu")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _record_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    model.fc1.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    return seen


@pytest.mark.parametrize(("mode", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_forward_runs_in_half_and_returns_fp32(mode: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Net()
    seen = _record_dtypes(model)
    policy = make_precision(mode, CPU, fp16_on_cpu=True)
    model = policy.convert_module(model)
    out = model(torch.randn(4, 8))
    loss = torch.nn.functional.mse_loss(out, torch.zeros(4, 1))
    assert seen == [dtype]
    assert out.dtype == torch.float32
    assert loss.dtype == torch.float32
    loss.backward()
    assert model.fc1.weight.grad is not None and model.fc1.weight.grad.dtype == torch.float32


def test_no_precision_leaves_the_forward_alone() -> None:
    model = Net()
    seen = _record_dtypes(model)
    policy = make_precision("no", CPU)
    assert type(policy) is Precision
    assert policy.convert_module(model) is model
    assert "forward" not in model.__dict__
    model(torch.randn(2, 8))
    assert seen == [torch.float32]


def test_convert_is_idempotent_and_revertible() -> None:
    model = Net()
    seen = _record_dtypes(model)
    policy = make_precision("bf16", CPU)
    policy.convert_module(policy.convert_module(model))
    assert model.forward.__wrapped__ == Net.forward.__get__(model)  # wrapped once, not twice
    assert list(inspect.signature(model.forward).parameters) == ["x"]
    assert list(model.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    policy.revert_module(model)
    assert model(torch.randn(2, 8)).dtype == torch.float32
    assert seen == [torch.float32]


def test_converted_model_pickles() -> None:
    model = make_precision("bf16", CPU).convert_module(Net())
    clone = pickle.loads(pickle.dumps(model))
    seen = _record_dtypes(clone)
    assert clone(torch.randn(2, 8)).dtype == torch.float32
    assert seen == [torch.bfloat16]


def test_autocast_kwargs_disabled_keeps_fp32() -> None:
    model = Net()
    seen = _record_dtypes(model)
    policy = make_precision("bf16", CPU, autocast_kwargs=AutocastKwargs(enabled=False))
    policy.convert_module(model)(torch.randn(2, 8))
    assert seen == [torch.float32]


def test_autocast_kwargs_reach_torch_autocast() -> None:
    policy = make_precision("bf16", CPU, autocast_kwargs=AutocastKwargs(cache_enabled=False))
    assert isinstance(policy, AutocastPrecision)
    with policy.forward_context():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert not torch.is_autocast_cache_enabled()


def test_autocast_context_for_code_outside_forward() -> None:
    policy = make_precision("bf16", CPU)
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    with policy.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with policy.autocast(AutocastKwargs(enabled=False)):
        assert (a @ b).dtype == torch.float32
    with Precision().autocast():
        assert (a @ b).dtype == torch.float32


def test_outputs_to_fp32_walks_containers() -> None:
    Pair = collections.namedtuple("Pair", "a b")
    half = torch.ones(2, dtype=torch.bfloat16)
    ints = torch.ones(2, dtype=torch.int64)
    out = outputs_to_fp32({"x": half, "y": [half, (ints, Pair(half, "s"))], "n": None})
    assert out["x"].dtype == torch.float32
    assert out["y"][0].dtype == torch.float32
    assert out["y"][1][0].dtype == torch.int64
    assert isinstance(out["y"][1][1], Pair)
    assert out["y"][1][1].a.dtype == torch.float32 and out["y"][1][1].b == "s"
    assert out["n"] is None
