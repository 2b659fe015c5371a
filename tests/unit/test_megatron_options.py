"""megatron_lm_config.recompute_activations and gradient_clipping, on one process.

Under MEGATRON_LM they apply whatever the degrees (the tp/pp runs are in
tests/distributed/test_tensor_parallel.py and test_pipeline_parallel.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from overdrive import MegatronLMPlugin
from overdrive.accelerator import Accelerator
from overdrive.errors import ConfigError
from overdrive.parallel.activation_checkpointing import repeated_layers
from overdrive.strategies.rules import LoopRules
from tests.helpers.env import forget_launcher
from tests.helpers.llama import small_llama


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> Iterator[None]:
    forget_launcher(monkeypatch, tmp_path)
    yield
    # MEGATRON_LM starts a (one-process) group even alone; later tests expect none.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _blocks() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3)])


def _one_step(plugin: MegatronLMPlugin) -> tuple[int, list[torch.Tensor], list[torch.Tensor]]:
    """(forward calls of one inner Linear, its gradients after the step, weights after)."""
    acc = Accelerator(megatron_lm_plugin=plugin)
    model = _blocks()
    calls = []
    model[1][0].register_forward_hook(lambda *args: calls.append(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    torch.manual_seed(1)
    acc.backward((model(torch.randn(4, 8)) * 100).sum())
    opt.step()
    grads = [p.grad.clone() for p in model.parameters()]
    return len(calls), grads, [p.detach().clone() for p in model.parameters()]


def test_recompute_runs_each_layer_again_in_backward_with_the_same_gradients() -> None:
    plain_calls, plain_grads, _ = _one_step(MegatronLMPlugin())
    calls, grads, _ = _one_step(MegatronLMPlugin(recompute_activations=True))
    assert (plain_calls, calls) == (1, 2)  # forward, then again in backward
    for mine, ref in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(mine, ref, rtol=0, atol=0)


def test_gradient_clipping_clips_by_the_global_norm_before_each_step() -> None:
    _, plain_grads, plain_after = _one_step(MegatronLMPlugin())
    _, grads, after = _one_step(MegatronLMPlugin(gradient_clipping=0.5))
    plain_norm = torch.nn.utils.get_total_norm(plain_grads)
    assert plain_norm > 10  # the loss is scaled so clipping has work to do
    assert torch.nn.utils.get_total_norm(grads).item() == pytest.approx(0.5, rel=1e-4)
    scale = 0.5 / (plain_norm + 1e-6)
    for mine, ref in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(mine, ref * scale)
    assert not all(torch.equal(a, b) for a, b in zip(after, plain_after, strict=True))


def test_options_stay_off_outside_megatron_lm() -> None:
    acc = Accelerator(cpu=True)
    assert acc.strategy.rules == LoopRules()


def test_repeated_layers_of_each_kind_of_model() -> None:
    llama = small_llama(3)
    found = repeated_layers(llama, key="k", source="s")
    assert [type(m).__name__ for m in found] == ["LlamaDecoderLayer"] * 3

    seq = _blocks()
    assert repeated_layers(seq, key="k", source="s") == list(seq)

    class Tower(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(4, 4)
            self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(5))

    tower = Tower()
    assert repeated_layers(tower, key="k", source="s") == list(tower.blocks)

    with pytest.raises(ConfigError, match="no layers to find") as info:
        repeated_layers(nn.Linear(2, 2), key="megatron_lm_config.recompute_activations", source="s")
    assert info.value.key == "megatron_lm_config.recompute_activations"
