"""Sizes that count tied weights once: a module placed on a device brings along the modules
its weights are tied to, and a device left empty may take the first smaller part that fits."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from overdrive.bigmodel.sizes import Entry, convert_file_size_to_int, is_leaf_layer


def _inside(name: str, tensor_name: str) -> bool:
    return tensor_name == name or tensor_name.startswith(name + ".")


def ties_leaving(name: str, tied_parameters: list[list[str]]) -> list[str]:
    """The tensors outside ``name`` that share a weight with a tensor inside it."""
    outside: list[str] = []
    for group in tied_parameters:
        inside = [_inside(name, t) for t in group]
        if any(inside) and not all(inside):
            outside += [t for t, is_in in zip(group, inside) if not is_in]
    return outside


def _holder(tensor_name: str, entries: list[Entry]) -> int:
    return next(i for i, (n, _) in enumerate(entries) if _inside(n, tensor_name))


def get_module_size_with_ties(
    tied_params: list[str],
    module_size: float,
    module_sizes: dict[str, float],
    modules_to_treat: list[Entry],
) -> tuple[float, list[str], list[nn.Module | torch.Tensor]]:
    """``module_size`` plus, for each tensor in ``tied_params``, the still unplaced module
    holding it less the shared tensor; with those modules' names and the modules."""
    names: list[str] = []
    modules: list[nn.Module | torch.Tensor] = []
    total = module_size
    for tensor_name in tied_params:
        holder_name, holder = modules_to_treat[_holder(tensor_name, modules_to_treat)]
        names.append(holder_name)
        modules.append(holder)
        total += module_sizes[holder_name] - module_sizes[tensor_name]
    return total, names, modules


def own_parts(name: str, module: nn.Module) -> list[Entry]:
    """``module``'s own parameters, then its children, named under ``name``."""
    parts: list[Entry] = [*module.named_parameters(recurse=False), *module.named_children()]
    return [(f"{name}.{n}", m) for n, m in parts]


def fallback_allocate(
    modules: list[Entry],
    module_sizes: dict[str, float],
    size_limit: float | str,
    no_split_module_classes: list[str] | None = None,
    tied_parameters: list[list[str]] | None = None,
) -> tuple[str | None, nn.Module | torch.Tensor | None, list[Entry]]:
    """The first part of ``modules`` (searched breadth first, splitting what may be split)
    that fits ``size_limit`` with its ties, and ``modules`` with it taken out (its parents
    replaced by their parts); ``(None, None, modules)`` when nothing fits."""
    try:
        limit = convert_file_size_to_int(size_limit) if isinstance(size_limit, str) else size_limit
    except ValueError:
        return None, None, modules
    if limit < 0:
        return None, None, modules
    no_split = no_split_module_classes or []
    tied = tied_parameters or []
    search = list(modules)
    found: str | None = None
    while search:
        name, module = search.pop(0)
        size, _, _ = get_module_size_with_ties(
            ties_leaving(name, tied), module_sizes[name], module_sizes, search
        )
        if size <= limit:
            found = name
            break
        if not is_leaf_layer(module, no_split):
            search = own_parts(name, cast(nn.Module, module)) + search  # not a leaf
    if found is None:
        return None, None, modules
    remaining = list(modules)
    for cut in (i for i, c in enumerate(found) if c == "."):
        parent = found[:cut]
        names = [n for n, _ in remaining]
        if parent in names:
            at = names.index(parent)
            remaining[at : at + 1] = own_parts(parent, cast(nn.Module, remaining[at][1]))
    at = [n for n, _ in remaining].index(found)
    name, module = remaining.pop(at)
    return name, module, remaining
