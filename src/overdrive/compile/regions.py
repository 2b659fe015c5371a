"""Regional compilation: compile each block of a model's repeated ``ModuleList`` (a
transformer's layers) on its own, so one compiled graph serves every block, and the rest of
the model separately. Cuts the cold start of ``torch.compile`` on large models.

``compile_regions_in_place`` is the in-place variant, the one algorithm behind the chain's
regional compile step (``overdrive.compile.model``), ``compile_regions_fsdp2`` and
``compile_regions_deepspeed``: each repeated block compiled in place, so hooks that
``fully_shard`` or a DeepSpeed engine add afterwards still run around every block.
"""

from __future__ import annotations

import sys
from types import MethodType
from typing import Any

import torch
from torch import nn


def _optimized_module() -> type | None:
    if "torch._dynamo" not in sys.modules:  # nothing can be compiled without it
        return None
    from torch._dynamo.eval_frame import OptimizedModule

    return OptimizedModule


def is_compiled_module(module: nn.Module) -> bool:
    """Whether ``module`` is the wrapper ``torch.compile`` returns."""
    kind = _optimized_module()
    return kind is not None and isinstance(module, kind)


def has_compiled_regions(module: nn.Module) -> bool:
    """Whether ``module`` or a submodule is a ``torch.compile`` wrapper."""
    kind = _optimized_module()
    if kind is None or not module._modules:
        return False
    return any(isinstance(sub, kind) for sub in module.modules())


def _compile(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    if isinstance(module, nn.ModuleList) and is_repeated_blocks(module):
        return nn.ModuleList(
            torch.compile(block, **compile_kwargs)  # type: ignore[misc]
            for block in module
        )
    if not has_repeated_blocks(module):
        return torch.compile(module, **compile_kwargs)  # type: ignore[return-value]
    # A shallow copy of this level whose children are compiled regions; bound methods kept
    # on the instance are rebound to the copy.
    copy = module.__class__.__new__(module.__class__)
    copy.__dict__.update(module.__dict__)
    for name, value in list(copy.__dict__.items()):
        if isinstance(value, MethodType) and value.__self__ is module:
            copy.__dict__[name] = MethodType(value.__func__, copy)
    copy._modules = {}
    for name, child in module.named_children():
        copy.add_module(name, _compile(child, **compile_kwargs))
    return copy


def compile_regions(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """A new model whose repeated blocks are each ``torch.compile``-d and whose other parts
    are compiled whole; ``module`` itself is left as it is. ``compile_kwargs`` go to
    ``torch.compile``. The result keeps the original as ``_orig_mod`` so it can be unwrapped
    (``extract_model_from_parallel``)."""
    compiled = _compile(module, **compile_kwargs)
    if "_orig_mod" not in compiled.__dict__:
        compiled.__dict__["_orig_mod"] = module
    return compiled


def compile_regions_deepspeed(module: nn.Module, **compile_kwargs: Any) -> None:
    """Regional compilation in place (``nn.Module.compile``), for the module inside a
    DeepSpeed engine, whose hooks and partitioned parameters a wrapper would get in the way
    of."""
    compile_regions_in_place(module, **compile_kwargs)


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


def compile_regions_in_place(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """Compile ``module``'s repeated blocks (each block with ``nn.Module.compile``, in place),
    recursing into children that hold some; a module without any is compiled whole, in place.

    In place, unlike ``torch.compile(module)``: the module keeps its own ``__call__``, so
    hooks installed later (FSDP2's pre- and post-forward hooks, a DeepSpeed engine's) still
    fire. Returns ``module``.
    """
    if is_repeated_blocks(module):
        for block in module.children():
            block.compile(**compile_kwargs)
    elif has_repeated_blocks(module):
        for child in module.children():
            compile_regions_in_place(child, **compile_kwargs)
    else:
        module.compile(**compile_kwargs)
    return module


def compile_regions_fsdp2(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """Regional compilation in place before ``fully_shard`` wraps the model (Hugging Face
    Accelerate's name for ``compile_regions_in_place``); returns ``module``."""
    return compile_regions_in_place(module, **compile_kwargs)
