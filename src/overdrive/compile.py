"""``torch.compile`` driven by the ``dynamo_config`` settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from overdrive.config.settings import Settings
from overdrive.errors import ConfigError

BACKEND = "dynamo_config.dynamo_backend"
MODE = "dynamo_config.dynamo_mode"
FULLGRAPH = "dynamo_config.dynamo_use_fullgraph"
DYNAMIC = "dynamo_config.dynamo_use_dynamic"


def compile_kwargs(settings: Settings) -> dict[str, Any] | None:
    """The ``torch.compile`` arguments the settings ask for, or None for no compilation."""
    backend = settings[BACKEND]
    if backend == "no":
        return None
    import torch._dynamo  # heavy: only when compiling

    available = torch._dynamo.list_backends(exclude_tags=())
    if backend not in available:
        raise ConfigError(
            f"dynamo_backend={backend!r} (from {settings.source(BACKEND)}) is not available "
            "in this PyTorch installation",
            key=BACKEND,
            fix=f"install the package that provides it, or use one of {', '.join(sorted(available))}",
        )
    kwargs: dict[str, Any] = {"backend": backend, "fullgraph": settings[FULLGRAPH]}
    mode = settings[MODE]
    if mode != "default":
        if backend != "inductor":
            raise ConfigError(
                f"dynamo_mode={mode!r} (from {settings.source(MODE)}) only applies to the "
                f"inductor backend; dynamo_backend={backend!r} would ignore it",
                key=MODE,
                fix="set dynamo_mode to default, or dynamo_backend to inductor",
            )
        kwargs["mode"] = mode
    # Unset means torch's automatic choice (dynamic after a shape changes), not "never".
    kwargs["dynamic"] = settings[DYNAMIC] if settings.is_set(DYNAMIC) else None
    return kwargs


@dataclass(frozen=True)
class CompileStep:
    """The parallelize chain's compile step: ``torch.compile`` with ``kwargs``, applied to
    the whole model once it is wrapped (as Hugging Face Accelerate compiles it)."""

    kwargs: dict[str, Any] = field(default_factory=dict)

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` compiled (an ``OptimizedModule``), unless it is compiled already."""
        if is_compiled(model):
            return model
        return torch.compile(model, **self.kwargs)  # type: ignore[return-value]


def compile_step(settings: Settings) -> CompileStep | None:
    """The compile step the ``dynamo_config`` settings ask for, or None (``no``)."""
    kwargs = compile_kwargs(settings)
    return None if kwargs is None else CompileStep(kwargs)


def compile_model(model: torch.nn.Module, settings: Settings) -> torch.nn.Module:
    """``model`` compiled as the settings say, or unchanged when ``dynamo_backend`` is no.

    The result is an ``OptimizedModule``; ``uncompiled`` returns the original module.
    """
    step = compile_step(settings)
    return model if step is None else step.apply(model)


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a ``torch.compile`` wrapper."""
    return uncompiled(module) is not module


def uncompiled(module: torch.nn.Module) -> torch.nn.Module:
    """The module ``torch.compile`` wrapped (``module`` itself when it is not compiled)."""
    if "torch._dynamo" not in sys.modules:  # nothing can be compiled without it
        return module
    from torch._dynamo.eval_frame import OptimizedModule

    return module._orig_mod if isinstance(module, OptimizedModule) else module


def compiled_like(compiled: torch.nn.Module, module: torch.nn.Module) -> torch.nn.Module | None:
    """A new ``torch.compile`` wrapper around ``module`` with ``compiled``'s settings (backend,
    mode...), or None when ``compiled`` is not a whole-model compiled module. ``compiled``
    itself still wraps what it wrapped (a prepared model keeps its DDP wrapper)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.eval_frame import OptimizedModule

    if not isinstance(compiled, OptimizedModule):
        return None
    return OptimizedModule(module, compiled.dynamo_ctx)
