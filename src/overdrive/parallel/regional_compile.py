"""Regional compilation for FSDP2: compile each repeated block in place, so hooks that
``fully_shard`` adds afterwards still run around every block."""

from __future__ import annotations

from typing import Any

from torch import nn


def is_repeated_blocks(module: nn.Module) -> bool:
    """An ``nn.ModuleList`` of one or more modules, all of the first one's class."""
    return (
        isinstance(module, nn.ModuleList)
        and len(module) > 0
        and all(isinstance(m, type(module[0])) for m in module)
    )


def has_repeated_blocks(module: nn.Module) -> bool:
    """Whether ``module`` holds repeated blocks at any depth."""
    return bool(module._modules) and any(is_repeated_blocks(m) for m in module.modules())


def compile_regions_fsdp2(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """Compile ``module``'s repeated blocks (each block with ``nn.Module.compile``, in place),
    recursing into children that hold some; a module without any is compiled whole, in place.

    In place, unlike ``torch.compile(module)``: the module keeps its own ``__call__``, so
    FSDP2's pre- and post-forward hooks installed later still fire. Returns ``module``.
    """
    if is_repeated_blocks(module):
        for block in module.children():
            block.compile(**compile_kwargs)
    elif has_repeated_blocks(module):
        for child in module.children():
            compile_regions_fsdp2(child, **compile_kwargs)
    else:
        module.compile(**compile_kwargs)
    return module
