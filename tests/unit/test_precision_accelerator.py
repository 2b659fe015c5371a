"""Mixed precision and compilation through the Accelerator on one process."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch import nn

from overdrive import AutocastKwargs, GradScalerKwargs
from overdrive.accelerator import Accelerator


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    for name in list(os.environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_", "TORCHELASTIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    # these cases test fp16's autocast and loss scaling, which a CPU runs when asked
    monkeypatch.setenv("OVERDRIVE_FP16_ON_CPU", "1")


def _parts(
    seed: int = 0,
) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return model, opt, sched


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)


def test_fp16_inf_step_is_skipped_with_scheduler_and_params_unchanged() -> None:
    acc = Accelerator(cpu=True, mixed_precision="fp16")
    model, opt, sched = acc.prepare(*_parts())
    skipped, lrs, scales = [], [], []
    for step in range(4):
        x, y = _batch(step)
        acc.backward(nn.functional.mse_loss(model(x), y))
        if step == 1:
            model[0].weight.grad[0, 0] = float("inf")
        before = copy.deepcopy(model.state_dict())
        opt.step()
        sched.step()
        opt.zero_grad()
        changed = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
        assert changed == (step != 1)
        skipped.append(acc.optimizer_step_was_skipped)
        lrs.append(sched.get_last_lr()[0])
        scales.append(acc.precision.scaler.get_scale())
    assert skipped == [False, True, False, False]
    assert lrs == [0.05, 0.05, 0.025, 0.0125]  # the skipped step does not advance the schedule
    assert scales == [65536.0, 32768.0, 32768.0, 32768.0]


def test_grad_scaler_kwargs_handler_reaches_the_scaler() -> None:
    handler = GradScalerKwargs(
        init_scale=8.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=7
    )
    acc = Accelerator(cpu=True, mixed_precision="fp16", kwargs_handlers=[handler])
    scaler = acc.precision.scaler
    assert scaler is not None
    assert (scaler.get_scale(), scaler.get_growth_factor()) == (8.0, 3.0)
    assert (scaler.get_backoff_factor(), scaler.get_growth_interval()) == (0.25, 7)


def test_bf16_forward_runs_in_bf16_and_returns_fp32() -> None:
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    model, opt, _ = _parts()
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    model, opt = acc.prepare(model, opt)
    x, y = _batch(0)
    out = model(x)
    loss = nn.functional.mse_loss(out, y)
    assert seen == [torch.bfloat16]
    assert out.dtype == loss.dtype == torch.float32
    acc.backward(loss)
    opt.step()
    assert not acc.optimizer_step_was_skipped


def test_fp16_clip_after_unscale_matches_fp32() -> None:
    norms = {}
    for mode in ("no", "fp16"):
        handlers = [GradScalerKwargs(init_scale=1024.0)] if mode == "fp16" else []
        acc = Accelerator(cpu=True, mixed_precision=mode, kwargs_handlers=handlers)
        model, opt, _ = acc.prepare(*_parts(seed=3))
        x, y = _batch(9)
        acc.backward(nn.functional.mse_loss(model(x), y))
        norms[mode] = acc.clip_grad_norm_(model.parameters(), 0.01)
        opt.step()
    # fp16 matmuls: ~1e-3 relative error; without unscale the norm would be 1024x too big.
    torch.testing.assert_close(norms["fp16"], norms["no"], rtol=1e-2, atol=0.0)


def test_dynamo_backend_compiles_bf16_model_and_unwraps_to_the_original() -> None:
    from torch._dynamo.eval_frame import OptimizedModule

    losses: dict[str, list[float]] = {}
    for backend in ("no", "aot_eager"):
        acc = Accelerator(cpu=True, mixed_precision="bf16", dynamo_backend=backend)
        model, opt, _ = _parts(seed=4)
        original = model
        model, opt = acc.prepare(model, opt)
        assert isinstance(model, OptimizedModule) == (backend != "no")
        assert acc.unwrap_model(model) is original
        losses[backend] = []
        for step in range(3):
            x, y = _batch(step)
            out = model(x)
            assert out.dtype == torch.float32
            loss = nn.functional.mse_loss(out, y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            losses[backend].append(loss.item())
    # the same bf16 ops run in both; only fusion/ordering may differ, well below bf16 roundoff
    torch.testing.assert_close(losses["aot_eager"], losses["no"], rtol=1e-3, atol=0.0)


def test_unwrap_without_fp32_wrapper_and_autocast_handler() -> None:
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    model, _, _ = _parts()
    prepared = acc.prepare(model)
    assert prepared(_batch(0)[0]).dtype == torch.float32
    plain = acc.unwrap_model(prepared, keep_fp32_wrapper=False)
    assert plain is model and "forward" not in plain.__dict__
    a = torch.randn(2, 2)
    with acc.autocast():
        assert (a @ a).dtype == torch.bfloat16
    with acc.autocast(AutocastKwargs(enabled=False)):
        assert (a @ a).dtype == torch.float32


def test_fp16_clip_grad_value_clips_unscaled_gradients() -> None:
    acc = Accelerator(
        cpu=True, mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)]
    )
    model, opt, _ = acc.prepare(*_parts(seed=5))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = _batch(3)
    acc.backward(nn.functional.mse_loss(model(x), y))
    acc.clip_grad_value_(model.parameters(), 1e-3)
    opt.step()
    moved = max((p.detach() - b).abs().max().item() for p, b in zip(model.parameters(), before))
    # lr 0.1 x clip 1e-3; clipping the still-scaled gradients would move 1024x less
    assert moved == pytest.approx(1e-4, rel=1e-3)


def test_grad_scaler_kwargs_under_bf16_warns_at_the_users_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from overdrive import precision

    monkeypatch.setattr(precision, "_WARNED", set())
    with pytest.warns(UserWarning, match=r"mixed_precision='bf16' \(from code") as record:
        acc = Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[GradScalerKwargs()])
    assert record[0].filename == __file__
    assert acc.scaler is None


def test_accelerator_takes_precision_by_precedence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    cfg = os.path.join(tmp_path, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write("mixed_precision: fp16\n")
    assert Accelerator(cpu=True, config_file=cfg).precision.name == "fp16"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert Accelerator(cpu=True, config_file=cfg).precision.name == "bf16"
    acc = Accelerator(cpu=True, config_file=cfg, mixed_precision="no")
    assert acc.precision.name == "no" and acc.scaler is None
