"""fp16/bf16 on CUDA and fp8 through torchao: run on a GPU machine, skipped elsewhere."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from overdrive import ConfigError, GradScalerKwargs
from overdrive.precision import ScaledPrecision, make_precision
from overdrive.precision.fp8 import fp8_hardware_problem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def _model(width: int = 64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, 16)).to(_cuda())


def _train(mode: str, steps: int = 10, width: int = 64) -> list[float]:
    device = _cuda()
    # a starting scale the first gradients do not overflow: no skipped step, comparable runs
    scaler = GradScalerKwargs(init_scale=1024.0) if mode == "fp16" else None
    policy = make_precision(mode, device, scaler_kwargs=scaler)
    model = policy.convert_module(_model(width))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    policy.register_optimizer(opt)
    losses = []
    for step in range(steps):
        g = torch.Generator(device=device).manual_seed(step)
        x = torch.randn(32, width, device=device, generator=g)
        loss = nn.functional.mse_loss(model(x), torch.tanh(x[:, :16]))
        assert loss.dtype == torch.float32
        policy.scale_loss(loss).backward()
        policy.optimizer_step(opt)
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(("mode", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_cuda_autocast_dtype_and_fp32_outputs(mode: str, dtype: torch.dtype) -> None:
    if mode == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("this GPU has no native bf16")
    policy = make_precision(mode, _cuda())
    model = _model()
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    out = policy.convert_module(model)(torch.randn(4, 64, device=_cuda()))
    assert seen == [dtype] and out.dtype == torch.float32


def test_cuda_fp16_skips_an_inf_step_and_backs_off() -> None:
    device = _cuda()
    policy = make_precision("fp16", device)
    assert isinstance(policy, ScaledPrecision) and policy.scaler is not None
    model = policy.convert_module(_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    policy.register_optimizer(opt)
    policy.scale_loss(model(torch.randn(4, 64, device=device)).float().pow(2).mean()).backward()
    model[0].weight.grad[0, 0] = float("inf")
    before = model[0].weight.detach().clone()
    assert policy.optimizer_step(opt) is False
    assert torch.equal(model[0].weight.detach(), before)
    assert policy.scaler.get_scale() == 32768.0


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_cuda_mixed_precision_tracks_fp32(mode: str) -> None:
    if mode == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("this GPU has no native bf16")
    ref, run = torch.tensor(_train("no")), torch.tensor(_train(mode))
    torch.testing.assert_close(run, ref, rtol=3e-2, atol=0.0)


def test_fp8_trains_close_to_bf16_or_explains_why_not() -> None:
    problem = fp8_hardware_problem(_cuda())
    if problem is not None:
        with pytest.raises(ConfigError, match="compute capability 8.9"):
            make_precision("fp8", _cuda())
        return
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    policy = make_precision("fp8", _cuda())
    model = policy.convert_module(_model(width=256))
    assert isinstance(model[0], Float8Linear) and isinstance(model[2], Float8Linear)
    # float8 matmuls (e4m3, 3-bit mantissa) are coarse: compare with bf16 loosely.
    fp8, bf16 = torch.tensor(_train("fp8", width=256)), torch.tensor(_train("bf16", width=256))
    torch.testing.assert_close(fp8, bf16, rtol=0.1, atol=0.0)
    assert fp8[-1] < fp8[0]
