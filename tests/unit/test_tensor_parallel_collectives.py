"""What tensor parallelism sends in a backward: each attention and MLP block's input
gradient leaves in one collective (an all-reduce, a reduce-scatter under sequence
parallelism), not one per colwise Linear (q, k, v, gate, up)."""

from __future__ import annotations

from collections import Counter
from typing import Any
from unittest.mock import patch

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from overdrive.parallel.tp import apply_tp
from overdrive.parallel.tp_shared_input import share_colwise_inputs
from tests.unit.test_sequence_parallel import _llama, _tp

HIDDEN = 16  # small_llama's


class CollectiveSizes(TorchDispatchMode):
    """(collective, elements sent) of each functional collective dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[tuple[str, int]] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._opname
        if func.namespace == "_c10d_functional" and name not in (
            "wait_tensor",
            "_wrap_tensor_autograd",
        ):
            self.seen[(name, args[0].numel())] += 1
        return func(*args, **(kwargs or {}))


def test_a_block_sends_its_input_gradient_in_one_reduce_scatter(two_process_mesh: Any) -> None:
    layers = 2
    model = _llama()
    apply_tp(model, two_process_mesh, _tp(), split_locally=True)
    ids = torch.randint(0, 32, (2, 8))
    logits = model(ids).logits
    counter = CollectiveSizes()
    with counter:
        logits.sum().backward()
    sent = counter.seen
    activation = ids.numel() * HIDDEN
    blocks = 2 * layers  # attention and MLP
    assert sent[("reduce_scatter_tensor", activation)] == blocks
    # One whole activation is all-reduced: the LM head's input gradient, whose input the
    # base model's output gather made a plain tensor. Before, each of the 5 colwise Linears
    # of a layer (q, k, v, gate, up) all-reduced its own.
    assert sent[("all_reduce", activation)] == 1
    norms = 2 * layers + 1  # their weights' gradients, summed over the sequence slices
    assert sent[("all_reduce", HIDDEN)] == norms
    assert all(param.grad is not None for param in model.parameters())


def _sent(model: torch.nn.Module, run: Any) -> Counter[tuple[str, int]]:
    counter = CollectiveSizes()
    with counter:
        run()
    return counter.seen


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_block_sends_its_input_gradient_in_one_all_reduce(
    two_process_mesh: Any, checkpointed: bool
) -> None:
    layers = 2
    model = _llama()
    if checkpointed:  # the layers' forwards run again in the backward, with new inputs
        model.gradient_checkpointing_enable({"use_reentrant": False})
    model.train()
    last = None

    def keep(*args: Any) -> Any:
        nonlocal last
        last = share_colwise_inputs(*args)
        return last

    with patch("overdrive.parallel.tp.share_colwise_inputs", keep):
        apply_tp(model, two_process_mesh, _tp(sequence_parallel=False), split_locally=True)
    ids = torch.randint(0, 32, (2, 8))
    activation = ids.numel() * HIDDEN
    with torch.no_grad():  # the rowwise Linears' (o_proj, down_proj) and the embedding's
        forward = _sent(model, lambda: model(ids))[("all_reduce", activation)]
    assert forward == 2 * layers + 1
    logits = model(ids).logits
    sent = _sent(model, lambda: logits.sum().backward())
    # one per attention and MLP block, and the LM head's own (before: one per colwise Linear)
    per_block = 2 * layers + 1
    if checkpointed:  # and the recomputed forwards' (PyTorch stops recomputing a layer early)
        assert per_block < sent[("all_reduce", activation)] <= per_block + forward
    else:
        assert sent[("all_reduce", activation)] == per_block
    assert set(sent) == {("all_reduce", activation)}
    assert all(param.grad is not None for param in model.parameters())
    assert last is not None and last.whole is None  # no activation held after the step
