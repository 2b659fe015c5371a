"""The parallelize chain is the only way a model is wrapped (issue 30, point 2).

One process (DDP on a one-process gloo group): activation checkpointing of Megatron-LM's
repeated layers, regional compile in place before the wrap step, DDP or nothing as the wrap
step, whole-model compile around the wrapped model; the FSDP orders run on 2 processes in
tests/distributed/test_fsdp.py ("compiled", "regional-compiled").
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributed._composable.contract import _get_registry
from torch.nn.parallel import DistributedDataParallel

from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.compile.model import CompileStep, uncompiled
from overdrive.parallel.activation_checkpointing import RecomputeLayers
from overdrive.parallel.chain import Chain, parallelize
from overdrive.strategies.ddp import DDPStrategy
from overdrive.strategies.rules import LoopRules
from overdrive.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")
RECOMPUTE = RecomputeLayers("megatron_lm_config.recompute_activations", "code")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(6, 6), nn.Tanh()) for _ in range(3))
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _checkpointed(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if "checkpoint" in (_get_registry(m) or {})]


def _compiled_in_place(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if getattr(m, "_compiled_call_impl", None) is not None]


def _grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model(x).square().sum().backward()
    return [p.grad.clone() for p in uncompiled(model).parameters() if p.grad is not None]


def test_regional_compile_runs_in_place_before_ddp_and_keeps_the_numbers(
    one_process_group: None,
) -> None:
    rules = LoopRules(recompute=RECOMPUTE, compile=CompileStep({"backend": "eager"}, regional=True))
    strategy = DDPStrategy(CPU, DistributedDataParallelKwargs(), rules=rules)
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    wrapped = strategy.setup_model(net, device_placement=True)
    assert isinstance(wrapped, DistributedDataParallel) and wrapped.module is net
    assert [n for n, _ in net.named_parameters()] == names  # in place: the user's names
    # each block, and each other child whole (as Accelerate's regions), but not the model
    assert _compiled_in_place(net) == [*net.blocks, net.head]
    assert _checkpointed(net) == list(net.blocks)  # recomputed: the repeated layers
    x = torch.randn(4, 6)
    for mine, ref in zip(_grads(wrapped, x), _grads(Net(), x), strict=True):
        torch.testing.assert_close(mine, ref)


def test_whole_model_compile_wraps_the_ddp_model(one_process_group: None) -> None:
    strategy = DDPStrategy(CPU, None, rules=LoopRules(compile=CompileStep({"backend": "eager"})))
    net = Net()
    wrapped = strategy.setup_model(net, device_placement=True)
    ddp = uncompiled(wrapped)
    assert wrapped is not ddp and isinstance(ddp, DistributedDataParallel)
    assert ddp.module is net and not _compiled_in_place(net)
    assert strategy.setup_model(ddp, device_placement=True) is ddp  # prepared once


def test_one_device_runs_the_chain_without_a_wrap_step() -> None:
    strategy = SingleDeviceStrategy(CPU, rules=LoopRules(recompute=RECOMPUTE))
    net = Net()
    assert strategy.setup_model(net, device_placement=True) is net
    assert _checkpointed(net) == list(net.blocks)
    again = strategy.setup_model(net, device_placement=True)  # prepared twice: once each
    assert again is net and _checkpointed(net) == list(net.blocks)


def test_a_model_that_does_not_train_is_compiled_but_not_wrapped_or_recomputed(
    one_process_group: None,
) -> None:
    rules = LoopRules(recompute=RECOMPUTE, compile=CompileStep({"backend": "eager"}))
    net = Net().requires_grad_(False)
    prepared = DDPStrategy(CPU, None, rules=rules).setup_model(net, device_placement=True)
    assert uncompiled(prepared) is net and prepared is not net
    assert not _checkpointed(net)


def test_steps_that_need_a_mesh_are_refused_without_one() -> None:
    from overdrive.parallel.fsdp_policy import FSDPPolicy

    with pytest.raises(AssertionError, match="need a mesh"):
        parallelize(Net(), None, Chain(fsdp=FSDPPolicy()))
