"""Tensor-parallel plans: module-name patterns mapped to how each module is split.

A plan is a dict ``{pattern: style}``. Patterns are ``fnmatch`` patterns over the names
``model.named_modules()`` gives (``*`` matches anything, dots included), so
``"layers.*.mlp.up_proj"`` names that projection in every layer. Styles:

* ``colwise``: a Linear's output features (or an Embedding's embedding dim) are split; its
  output stays split for the next ``rowwise`` module.
* ``rowwise``: a Linear's input features (or an Embedding's rows) are split; the partial
  outputs are summed, so its output is whole again.
* ``colwise_rep`` (transformers: ``colwise_gather_output``): colwise, then the output is
  gathered whole (an LM head whose logits the loss reads).
* ``rowwise_rep`` (transformers: ``embedding_rowwise``): rowwise whose input is whole (an
  embedding lookup, or a Linear after a replicated module).

* ``sequence_parallel``: the module (a norm, or any module that treats each token on its
  own) runs on this process's slice of the sequence (dim 1 of ``(batch, sequence, ...)``
  activations); its weights are replicated and their gradients summed over the slices. A
  plan with such an entry is sequence-parallel throughout: every ``rowwise`` output is split
  over the sequence (reduce-scatter), every ``colwise`` module gathers its input, a whole
  input of a ``sequence_parallel`` module is split there, and the model's outputs are
  gathered whole. The sequence length must be a multiple of the degree.

Torch-free: the plan of a ``ParallelismConfig`` is checked when it is built.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from overdrive.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

ALIASES = {
    "colwise": "colwise",
    "rowwise": "rowwise",
    "colwise_rep": "colwise_rep",
    "colwise_gather_output": "colwise_rep",
    "rowwise_rep": "rowwise_rep",
    "embedding_rowwise": "rowwise_rep",
    "sequence_parallel": "sequence_parallel",
}
STYLES = ("colwise", "rowwise", "colwise_rep", "rowwise_rep", "sequence_parallel")


def check_plan(plan: object, source: str) -> dict[str, str]:
    """``plan`` with every style in its canonical name; an error naming a bad entry."""
    if not isinstance(plan, dict) or not plan:
        raise ConfigError(
            f"{source}: a tensor-parallel plan is a non-empty dict of module-name pattern -> "
            f"style, not {type(plan).__name__}",
            key="tp_plan",
            fix='pass e.g. {"net.0": "colwise", "net.2": "rowwise"}',
        )
    out: dict[str, str] = {}
    for pattern, style in plan.items():
        canonical = ALIASES.get(style) if isinstance(style, str) else None
        if not isinstance(pattern, str) or canonical is None:
            raise ConfigError(
                f"{source}: {pattern!r}: {style!r} is not a tensor-parallel style this version "
                "applies",
                key="tp_plan",
                fix=f"use one of {', '.join(STYLES)} (docs/parallelism.md)",
            )
        out[pattern] = canonical
    return out


def model_plan(model: object) -> dict[str, str] | None:
    """A transformers model's own plan, names relative to ``model`` (None if it has none).

    transformers keeps the whole model's plan in ``model._tp_plan`` (LM head and embeddings
    included); older versions only the base model's in ``config.base_model_tp_plan``.
    """
    own = getattr(model, "_tp_plan", None)
    if isinstance(own, dict) and own:
        return dict(own)
    config = getattr(model, "config", None)
    base = getattr(config, "base_model_tp_plan", None)
    if not isinstance(base, dict) or not base:
        return None
    prefix = getattr(model, "base_model_prefix", "")
    inner = getattr(model, prefix, None) if prefix else None
    if inner is None or inner is model:
        return dict(base)
    return {f"{prefix}.{pattern}": style for pattern, style in base.items()}


def resolve(
    model: nn.Module, plan: dict[str, str], source: str, *, whole: bool = True
) -> dict[str, str]:
    """Concrete module name -> style; every pattern must name at least one module of a
    ``whole`` model (a pipeline stage holds some of them only)."""
    names = [name for name, _ in model.named_modules() if name]
    out: dict[str, str] = {}
    for pattern, style in plan.items():
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits and whole:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise ConfigError(
                f"{source}: the pattern {pattern!r} names no module of "
                f"{type(model).__name__} (its modules: {shown})",
                key="tp_plan",
                fix="use names from model.named_modules(), with * for layer numbers",
            )
        for name in hits:
            out[name] = style
    return out
