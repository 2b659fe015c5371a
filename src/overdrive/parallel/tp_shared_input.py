"""Colwise Linears that read the same whole tensor share one ``Replicate`` DTensor of it.

``ColwiseParallel`` turns a plain input into a ``Replicate`` DTensor on its own, and the
backward of that conversion all-reduces the Linear's (partial) input gradient. Attention's
q, k and v projections, and an MLP's gate and up projections, read the same hidden states:
each would send a whole activation in the backward, five a Llama layer, where the summed
gradient needs one all-reduce per block (Megatron-LM's layout, and torchtitan's). Here a
colwise Linear reading the tensor the previous one read reuses its DTensor, so autograd sums
their partial gradients before the conversion's one all-reduce.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class LastConversion:
    """The tensor the colwise Linears last read and its ``Replicate`` DTensor. Held until a
    rowwise Linear starts (the colwise ones of its block are done) or a block or the model
    returns; weak references would not do: under activation checkpointing the forward
    keeps no tensor for the backward, so the DTensor would be gone before the next Linear."""

    def __init__(self) -> None:
        self.whole: torch.Tensor | None = None
        self.converted: torch.Tensor | None = None

    def forget(self, *_: object) -> None:
        self.whole = self.converted = None


def _shared(
    mesh: DeviceMesh,
    last: LastConversion,
    module: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    from torch.distributed.tensor import DTensor, Replicate

    if not args or not isinstance(args[0], torch.Tensor) or isinstance(args[0], DTensor):
        return None
    if last.whole is not args[0] or last.converted is None:
        last.whole = args[0]
        last.converted = DTensor.from_local(args[0], mesh, [Replicate()], run_check=False)
    return (last.converted, *args[1:]), kwargs


def share_colwise_inputs(
    model: nn.Module, mesh: DeviceMesh, names: dict[str, str], blocks: list[str]
) -> LastConversion:
    """Pre-hooks on the colwise Linears of ``names`` (module -> style): a plain input the
    previous one read is not converted again. Rowwise Linears (as they start), ``blocks``
    and the model (as they return) forget it. Returns the shared state."""
    last = LastConversion()
    hook = partial(_shared, mesh, last)
    for name, kind in names.items():
        module = model.get_submodule(name)
        if kind in ("colwise", "colwise_rep"):
            module.register_forward_pre_hook(hook, prepend=True, with_kwargs=True)
        elif kind in ("rowwise", "rowwise_rep"):
            module.register_forward_pre_hook(last.forget)
    for name in blocks:
        model.get_submodule(name).register_forward_hook(last.forget)
    model.register_forward_hook(last.forget)
    return last
