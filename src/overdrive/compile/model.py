"""``torch.compile`` driven by the ``dynamo_config`` settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from overdrive.compile.regions import compile_regions_in_place
from overdrive.config.settings import Settings
from overdrive.errors import ConfigError

BACKEND = "dynamo_config.dynamo_backend"
MODE = "dynamo_config.dynamo_mode"
FULLGRAPH = "dynamo_config.dynamo_use_fullgraph"
DYNAMIC = "dynamo_config.dynamo_use_dynamic"
REGIONAL = "dynamo_config.dynamo_use_regional_compilation"


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
    """The parallelize chain's compile step: ``torch.compile`` with ``kwargs``.

    Whole-model (``regional=False``): the model once it is wrapped becomes an
    ``OptimizedModule``, as Hugging Face Accelerate compiles it. Regional: each repeated
    block is compiled in place before the model is wrapped (torchtitan's order: tp -> ac ->
    compile -> fsdp), so the model keeps its identity and parameter names and the wrapper's
    hooks run around compiled blocks."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    regional: bool = False

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` compiled (an ``OptimizedModule``), unless it is compiled already."""
        if is_compiled(model):
            return model
        return torch.compile(model, **self.kwargs)  # type: ignore[return-value]

    def apply_regions(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` with each repeated block compiled in place (the whole model in place
        when it repeats none); returns ``model``."""
        import torch._dynamo.config as dynamo_config  # heavy: only when compiling

        # As torchtitan's per-block recipe (and Hugging Face Accelerate's under FSDP2): a
        # checkpointed block does not replay its forward's Python side effects in backward,
        # and data-dependent scalars stay in the graph.
        dynamo_config.capture_scalar_outputs = True
        dynamo_config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
        return compile_regions_in_place(model, **self.kwargs)


def compile_step(settings: Settings) -> CompileStep | None:
    """The compile step the ``dynamo_config`` settings ask for, or None (``no``)."""
    kwargs = compile_kwargs(settings)
    if kwargs is None:
        return None
    return CompileStep(kwargs, regional=bool(settings[REGIONAL]))


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
