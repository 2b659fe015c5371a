"""Where to cut a model into pipeline stages of about equal size: a device map that fills the
stages in module order, and the split points (module paths) it implies."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeGuard

import torch
from torch import nn

from overdrive.errors import OverdriveError

_CONTAINERS = (nn.ModuleList, nn.ModuleDict)


def _own_bytes(module: nn.Module, seen: set[int]) -> int:
    """Bytes of ``module``'s parameters and buffers not counted yet (tied tensors once)."""
    total = 0
    for tensor in [*module.parameters(), *module.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def _size(module: nn.Module) -> int:
    return _own_bytes(module, set())


def _direct_tensors(prefix: str, module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    named = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
    return [(f"{prefix}.{n}" if prefix else n, t) for n, t in named]


def _children(prefix: str, module: nn.Module) -> list[tuple[str, nn.Module | torch.Tensor]]:
    kids: list[tuple[str, nn.Module | torch.Tensor]] = [
        (f"{prefix}.{n}" if prefix else n, m) for n, m in module.named_children()
    ]
    return [*_direct_tensors(prefix, module), *kids]


_UNITS = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_UNITS.update({"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12})


def as_bytes(value: int | str) -> int:
    """A memory size as bytes: an int, or a string such as ``"10GiB"`` or ``"500 MB"``."""
    if isinstance(value, int):
        return value
    text = str(value).upper().replace(" ", "")
    for unit, scale in _UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(float(text.removesuffix("B")))


def _splittable(module: object, no_split: set[str]) -> TypeGuard[nn.Module]:
    return (
        isinstance(module, nn.Module)
        and bool(list(module.children()))
        and type(module).__name__ not in no_split
    )


def balanced_device_map(
    model: nn.Module,
    num_stages: int,
    no_split_module_classes: Sequence[str] | None = None,
    max_memory: Mapping[int | str, int | str] | None = None,
) -> dict[str, int]:
    """Module (and loose tensor) paths -> stage index, filling stage 0, then 1, ... in the
    order the model defines its modules, each stage up to its share of the model's bytes
    (``max_memory[i]`` where given, else a tenth more than an even share). A module too big
    for what its stage has left is split into its children unless its class is in
    ``no_split_module_classes``; containers (``ModuleList``) are always opened, since their
    forward is never called. The last stage takes whatever is left."""
    no_split = set(no_split_module_classes or ())
    if max_memory is not None:
        budgets = [
            as_bytes(max_memory.get(i, max_memory.get(str(i), 0))) for i in range(num_stages)
        ]
    else:
        share = math.ceil(_size(model) / num_stages * 1.1)
        budgets = [share] * num_stages
    todo = _children("", model)
    placed: dict[str, int] = {}
    stage, used = 0, 0
    seen: set[int] = set()
    while todo:
        name, item = todo.pop(0)
        if isinstance(item, _CONTAINERS):
            todo = _children(name, item) + todo
            continue
        probe = set(seen)
        size = (
            _own_bytes(item, probe) if isinstance(item, nn.Module) else _tensor_bytes(item, probe)
        )
        last = stage == num_stages - 1
        if last or used + size <= budgets[stage]:
            placed[name], used, seen = stage, used + size, probe
            continue
        if _splittable(item, no_split):
            todo = _children(name, item) + todo
            continue
        if used == 0 and max_memory is not None:
            raise OverdriveError(
                f"{name} ({size} bytes) does not fit stage {stage}'s max_memory "
                f"({budgets[stage]} bytes)\n  fix: give that stage more memory"
            )
        if used == 0:
            placed[name], used, seen = stage, size, probe
            continue
        stage, used = stage + 1, 0
        todo.insert(0, (name, item))
    return placed


def _tensor_bytes(tensor: torch.Tensor, seen: set[int]) -> int:
    if id(tensor) in seen:
        return 0
    seen.add(id(tensor))
    return int(tensor.numel() * tensor.element_size())


def split_points_from_map(
    model: nn.Module, device_map: Mapping[str, object], num_stages: int
) -> list[str]:
    """The first module placed on each stage after the first: where each stage begins."""
    modules = dict(model.named_modules())
    points = []
    for stage in range(1, num_stages):
        found = next(
            (
                name
                for name, where in device_map.items()
                if where == stage and isinstance(modules.get(name), nn.Module)
            ),
            None,
        )
        if found is None:
            raise OverdriveError(
                f"no module of {type(model).__name__} starts pipeline stage {stage} of "
                f"{num_stages}: the model has too few modules to split that many ways\n"
                "  fix: run on fewer processes, or pass split_points by hand"
            )
        points.append(found)
    return points
