"""Two steps of the parallelize chain (``parallel/chain.py``) that give every process the
main process's weights, one tensor at a time: ``FillFromMain`` fills a split or sharded
model that some processes built empty (on the meta device), after the wrap step (FSDP1:
unit by unit as it wraps them); ``BroadcastFromMain`` overwrites every process's copy when
all of them built the model, first in the chain (before a pipeline keeps its stage)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from overdrive.parallel.meta_init import broadcast_buffers, is_empty
from overdrive.parallel.rebind import named_params


@dataclass(frozen=True)
class FillFromMain:
    """Fill the processes' empty parts from ``source``: the main process's weights (empty
    elsewhere), taken before the chain runs. ``per_unit``: FSDP1 fills each unit as it wraps
    it (``unit_filler``); otherwise the wrapped model is filled at once (``apply``)."""

    source: Mapping[str, torch.Tensor]
    device: torch.device
    per_unit: bool = False

    @classmethod
    def of(cls, model: nn.Module, device: torch.device, *, per_unit: bool) -> FillFromMain:
        """The step for ``model``: its state on the main process, by name. Per unit: every
        parameter and buffer (non-persistent ones too), detached so that the values outlive
        the model's move to the meta device; else its state dict."""
        if not _is_main():
            return cls({}, device, per_unit)
        if per_unit:
            return cls({n: t.detach() for n, t in _all_tensors(model)}, device, per_unit)
        return cls(model.state_dict(), device, per_unit)

    def apply(self, module: nn.Module) -> None:
        """Allocate this process's part of the wrapped ``module`` and copy the main
        process's weights in. Collective."""
        fill_from_main(module, self.source, self.device)

    def unit_filler(self, root: nn.Module) -> Callable[[nn.Module], None]:
        """FSDP1's ``param_init_fn`` for ``root``, all empty: allocate one module's own
        tensors on the device and broadcast the main process's values into them, module by
        module as each unit is sharded (a process holds its shards plus one unit)."""
        import torch.distributed as dist

        paths = {id(m): name for name, m in root.named_modules()}
        source, device, main = self.source, self.device, _is_main()

        def fill(module: nn.Module) -> None:
            module.to_empty(device=device, recurse=False)
            prefix = paths[id(module)]
            with torch.no_grad():
                for name, tensor in _all_tensors(module, recurse=False):
                    if main:
                        tensor.copy_(source[f"{prefix}.{name}" if prefix else name])
                    if dist.is_initialized():
                        dist.broadcast(tensor, src=0)

        return fill


@dataclass(frozen=True)
class BroadcastFromMain:
    """Give every process the main process's parameters and buffers, each sent through
    ``device`` (FSDP's ``sync_module_states``; a pipeline's stages before the split)."""

    device: torch.device

    def apply(self, module: nn.Module) -> None:
        """Overwrite ``module``'s tensors with the main process's. Collective."""
        broadcast_from_main(module, self.device)


def fill_from_main(
    model: nn.Module, full_state: Mapping[str, torch.Tensor], device: torch.device
) -> None:
    """Allocate this process's part of ``model`` and copy the main process's weights in.

    ``full_state`` is the whole model's state dict on the main process (empty elsewhere). A
    process other than the main one holds its part plus, for a moment, one full tensor
    (PyTorch's own broadcast_from_rank0 keeps them all). Collective.
    """
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, distribute_tensor

    if is_empty(model):
        model.to_empty(device=device)  # split or sharded by now: only this process's part
    main = not dist.is_initialized() or dist.get_rank() == 0
    with torch.no_grad():
        for name, param in named_params(model).items():
            local = param.to_local() if isinstance(param, DTensor) else param
            full = full_state[name] if main else None
            if full is None:
                full = torch.empty(param.shape, dtype=param.dtype, device=local.device)
            full = full.to(device=local.device, dtype=param.dtype)
            # From the main process to all: the first process of a DTensor's own mesh
            # (which distribute_tensor would scatter from) may be an empty one.
            dist.broadcast(full, src=0)
            if isinstance(param, DTensor):
                mesh, placements = param.device_mesh, param.placements
                part = distribute_tensor(full, mesh, placements, src_data_rank=None)
                local.copy_(part.to_local())
            else:
                local.copy_(full)
            del full
    broadcast_buffers(model, device)


def broadcast_from_main(model: nn.Module, device: torch.device) -> None:
    """Give every process the main process's parameters and buffers, one tensor at a time
    through ``device`` (FSDP2 and pipeline stages have no ``sync_module_states``). Collective."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            on_device = tensor.data.to(device)  # nccl sends device tensors only
            dist.broadcast(on_device, src=0)
            if on_device is not tensor.data:
                tensor.data.copy_(on_device)


def _is_main() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def _all_tensors(module: nn.Module, recurse: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Parameters and buffers (non-persistent ones too), by name."""
    yield from module.named_parameters(recurse=recurse)
    yield from module.named_buffers(recurse=recurse)
