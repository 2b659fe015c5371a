"""fp16 dynamic loss scaling, driven through the policy with a plain torch optimizer."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from overdrive import GradScalerKwargs, precision
from overdrive.precision import FP8RecipeKwargs, ScaledPrecision, make_precision

CPU = torch.device("cpu")


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _setup(
    seed: int = 0, **scaler: float
) -> tuple[torch.nn.Module, torch.optim.Optimizer, ScaledPrecision]:
    model = _model(seed)
    kwargs = GradScalerKwargs(**scaler) if scaler else None  # type: ignore[arg-type]
    policy = make_precision("fp16", CPU, fp16_on_cpu=True, scaler_kwargs=kwargs)
    assert isinstance(policy, ScaledPrecision)
    model = policy.convert_module(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    policy.register_optimizer(optimizer)
    return model, optimizer, policy


def _backward(model: torch.nn.Module, policy: ScaledPrecision, step: int) -> None:
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), y)
    policy.scale_loss(loss).backward()


def test_injected_inf_skips_exactly_that_step_and_halves_the_scale() -> None:
    model, optimizer, policy = _setup()
    applied, scales = [], []
    for step in range(4):
        _backward(model, policy, step)
        before = copy.deepcopy(model.state_dict())
        if step == 2:
            model[0].weight.grad[0, 0] = float("inf")
        applied.append(policy.optimizer_step(optimizer))
        scales.append(policy.scaler.get_scale())
        changed = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
        assert changed == (step != 2)
        optimizer.zero_grad()
    assert applied == [True, True, False, True]
    assert scales == [65536.0, 65536.0, 32768.0, 32768.0]


def test_nan_gradient_is_skipped_too() -> None:
    model, optimizer, policy = _setup()
    _backward(model, policy, 0)
    model[2].bias.grad.fill_(float("nan"))
    assert policy.optimizer_step(optimizer) is False


def test_grad_scaler_kwargs_reach_the_scaler() -> None:
    model, optimizer, policy = _setup(
        init_scale=1024.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2
    )
    scaler = policy.scaler
    assert scaler.get_scale() == 1024.0
    assert scaler.get_growth_factor() == 4.0
    assert scaler.get_backoff_factor() == 0.25
    assert scaler.get_growth_interval() == 2
    scales = []
    for step in range(3):
        _backward(model, policy, step)
        if step == 2:
            model[0].bias.grad.fill_(float("inf"))
        policy.optimizer_step(optimizer)
        optimizer.zero_grad()
        scales.append(policy.scaler.get_scale())
    assert scales == [1024.0, 4096.0, 1024.0]  # grows x4 after 2 clean steps, backs off x0.25


def test_disabled_scaler_never_scales_or_skips() -> None:
    model, optimizer, policy = _setup(enabled=False)
    assert not policy.scaler.is_enabled()
    loss = torch.tensor(3.0, requires_grad=True)
    assert policy.scale_loss(loss) is loss
    _backward(model, policy, 0)
    model[0].bias.grad.fill_(float("inf"))
    assert policy.optimizer_step(optimizer) is True


def test_unscale_divides_by_the_scale_once_per_step() -> None:
    model, optimizer, policy = _setup(init_scale=256.0)
    _backward(model, policy, 0)
    scaled = model[0].weight.grad.clone()
    policy.unscale_(optimizer)
    policy.unscale_(optimizer)  # idempotent within a step: not divided twice
    torch.testing.assert_close(model[0].weight.grad, scaled / 256.0)
    assert policy.scaler.get_scale() == 256.0  # reading the scaler mid-step changes nothing
    weight = model[0].weight.detach().clone()
    assert policy.optimizer_step(optimizer) is True  # step does not unscale again
    torch.testing.assert_close(model[0].weight.detach(), weight - 0.1 * scaled / 256.0)
    optimizer.zero_grad()
    _backward(model, policy, 1)  # the next step unscales afresh
    scaled = model[0].weight.grad.clone()
    policy.unscale_(optimizer)
    torch.testing.assert_close(model[0].weight.grad, scaled / 256.0)


def test_clip_after_unscale_matches_fp32_norm() -> None:
    fp32 = _model(seed=1)
    model, optimizer, policy = _setup(seed=1, init_scale=1024.0)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
    torch.nn.functional.mse_loss(fp32(x), y).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(fp32.parameters(), 0.1)
    policy.scale_loss(torch.nn.functional.mse_loss(model(x), y)).backward()
    policy.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    # fp16 matmuls carry ~1e-3 relative error; a missing unscale would be off by 1024x.
    torch.testing.assert_close(norm, ref_norm, rtol=1e-2, atol=0.0)
    assert policy.optimizer_step(optimizer) is True
    clipped = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    torch.testing.assert_close(clipped, torch.tensor(0.1), rtol=1e-4, atol=0.0)


def test_update_waits_for_every_registered_optimizer() -> None:
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    policy = make_precision("fp16", CPU, fp16_on_cpu=True)
    policy.register_optimizer(opt_a)
    policy.register_optimizer(opt_b)
    policy.scale_loss(b(a(torch.randn(2, 4))).sum()).backward()
    a.weight.grad[0, 0] = float("inf")
    grad_b = b.weight.grad.clone()
    assert policy.optimizer_step(opt_a) is False
    # b must unscale by the scale the loss was scaled with, not the backed-off one
    weight_b = b.weight.detach().clone()
    assert policy.optimizer_step(opt_b) is True
    torch.testing.assert_close(b.weight.detach(), weight_b - 0.1 * grad_b / 65536.0)
    assert policy.scaler.get_scale() == 32768.0  # updated once, after both


def test_state_dict_round_trip() -> None:
    model, optimizer, policy = _setup(init_scale=512.0, growth_interval=3)
    _backward(model, policy, 0)
    model[0].bias.grad.fill_(float("inf"))
    policy.optimizer_step(optimizer)
    state = policy.state_dict()
    assert state["scale"] == 256.0 and state["growth_interval"] == 3
    fresh = make_precision("fp16", CPU, fp16_on_cpu=True)
    fresh.load_state_dict(state)
    assert fresh.scaler.get_scale() == 256.0
    assert fresh.scaler.get_growth_interval() == 3
    fresh.load_state_dict({})  # a checkpoint without a scaler keeps the current one
    assert fresh.scaler.get_scale() == 256.0


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "_WARNED", set())


@pytest.mark.parametrize("mode", ["no", "bf16"])
def test_only_fp16_has_a_scaler(mode: str, fresh_warnings: None) -> None:
    handler = GradScalerKwargs(init_scale=2.0)
    with pytest.warns(
        UserWarning,
        match=rf"GradScalerKwargs has no effect with mixed_precision='{mode}' \(from env X\): only fp16",
    ):
        policy = make_precision(mode, CPU, fp16_on_cpu=True, scaler_kwargs=handler, source="env X")
    assert policy.scaler is None
    loss = torch.tensor(1.0)
    assert policy.scale_loss(loss) is loss
    assert policy.state_dict() == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process, not on every Accelerator
        make_precision(mode, CPU, fp16_on_cpu=True, scaler_kwargs=handler)


def test_handlers_the_mode_uses_do_not_warn(fresh_warnings: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_precision("fp16", CPU, fp16_on_cpu=True, scaler_kwargs=GradScalerKwargs())
        make_precision("bf16", CPU)
    with pytest.warns(UserWarning, match="DeepSpeed runs its own loss scaling"):
        make_precision(
            "fp16",
            CPU,
            fp16_on_cpu=True,
            scaler_kwargs=GradScalerKwargs(),
            precision_owner="DeepSpeed",
        )
    with pytest.warns(UserWarning, match="FP8RecipeKwargs has no effect.*'bf16'"):
        make_precision("bf16", CPU, fp8_recipe=FP8RecipeKwargs(recipe="rowwise"))


def test_step_without_gradients_behaves_like_fp32() -> None:
    model, optimizer, policy = _setup()
    weight = model[0].weight.detach().clone()
    assert policy.optimizer_step(optimizer) is True  # no backward yet: nothing to do
    assert torch.equal(model[0].weight.detach(), weight)
    _backward(model, policy, 0)  # and the next real step works as usual
    assert policy.optimizer_step(optimizer) is True
    assert not torch.equal(model[0].weight.detach(), weight)
    # an optimizer whose parameters got no gradient this step steps like fp32 as well
    idle = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    policy.register_optimizer(idle)
    _backward(model, policy, 1)
    assert policy.optimizer_step(idle) is True
    assert policy.optimizer_step(optimizer) is True
    assert policy.scaler.get_scale() == 65536.0
    # unscaling (clipping) a gradient-less optimizer, then not stepping it, breaks nothing
    policy.unscale_(idle)
    _backward(model, policy, 2)
    assert policy.optimizer_step(optimizer) is True
