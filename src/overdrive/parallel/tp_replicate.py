"""Parameters a tensor-parallel plan leaves whole become replicated DTensors on the tp mesh.

With one data-parallel process nothing else turns them into DTensors (FSDP2 would, at the
cost of copying every parameter in and out on each step), and an optimizer's foreach
kernels refuse a list that mixes DTensors with plain tensors. The module still computes on
plain tensors: while it runs, each such parameter is read through its local value
(``to_local``: differentiable and without communication, since every process of the tp
group holds the same whole value and, its inputs being whole too, computes the same
gradient).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def _show_local(module: nn.Module, args: tuple[object, ...]) -> None:
    # An instance attribute wins over nn.Module.__getattr__, which is where parameters live.
    for name in module._overdrive_replicated:  # type: ignore[union-attr]
        module.__dict__[name] = module._parameters[name].to_local()  # type: ignore[union-attr]


def _hide_local(module: nn.Module, args: tuple[object, ...], output: object) -> None:
    for name in module._overdrive_replicated:  # type: ignore[union-attr]
        module.__dict__.pop(name, None)


def replicate_leftovers(model: nn.Module, mesh: DeviceMesh) -> list[str]:
    """Make every plain parameter of ``model`` a ``Replicate`` DTensor on ``mesh``, in place.

    A parameter shared by several modules (tied weights) stays shared. Returns the names of
    the modules that now read their parameters through local values.
    """
    from torch.distributed.tensor import DTensor, Replicate

    converted: dict[int, nn.Parameter] = {}
    touched = []
    for mod_name, module in model.named_modules():
        names = []
        for name, param in list(module._parameters.items()):
            if param is None or isinstance(param, DTensor):
                continue
            if id(param) not in converted:
                value = DTensor.from_local(param.data, mesh, [Replicate()], run_check=False)
                converted[id(param)] = nn.Parameter(value, requires_grad=param.requires_grad)
            module._parameters[name] = converted[id(param)]
            names.append(name)
        if names:
            module._overdrive_replicated = tuple(names)
            module.register_forward_pre_hook(_show_local)
            module.register_forward_hook(_hide_local, always_call=True)
            touched.append(mod_name)
    return touched
