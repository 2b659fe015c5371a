"""``apply_tp``: split a model's modules over the ``tp`` mesh dimension with DTensor.

The plan comes from the user (``ParallelismConfig(tp_plan=...)``) or from the model
(transformers models carry their own); see ``overdrive.parallel.tp_plan`` for its format.
Sequence parallelism changes the layouts between the split modules
(``overdrive.parallel.tp_sequence``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from torch import nn

from overdrive.errors import ConfigError
from overdrive.parallel import tp_sequence
from overdrive.parallel.tp_plan import check_plan, model_plan, resolve
from overdrive.parallel.tp_settings import TPSettings
from overdrive.parallel.tp_shared_input import share_colwise_inputs

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ParallelStyle


def _style(name: str) -> ParallelStyle | None:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if name == "colwise":
        return ColwiseParallel()
    if name == "rowwise":
        return RowwiseParallel()
    if name == "colwise_rep":
        return ColwiseParallel(output_layouts=Replicate())
    if name == "rowwise_rep":
        return RowwiseParallel(input_layouts=Replicate())
    return tp_sequence.style(name)


def check_heads(model: nn.Module, tp: TPSettings) -> None:
    """The model's attention (and key/value) heads split evenly over ``tp.degree``."""
    config = getattr(model, "config", None)
    for attr in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, attr, None)
        if isinstance(heads, int) and heads % tp.degree:
            raise ConfigError(
                f"tensor-parallel degree {tp.degree} ({tp.key}, from {tp.source}) does not "
                f"divide the model's {attr} ({heads}): each process must hold whole heads",
                key=tp.key,
                fix=f"choose a degree that divides {heads} (e.g. "
                f"{max(d for d in range(1, heads + 1) if heads % d == 0 and d <= tp.degree)})",
            )


def _untie(model: nn.Module, names: dict[str, str]) -> dict[str, str]:
    """Drop modules whose weight another module shares (tied embeddings): splitting one
    would untie them; both then run whole on every process, which stays exact."""
    owners: dict[int, list[str]] = {}
    for mod_name, module in model.named_modules(remove_duplicate=False):
        for p in module.parameters(recurse=False):
            owners.setdefault(id(p), []).append(mod_name)
    kept = {}
    for name, style in names.items():
        module = model.get_submodule(name)
        shared = any(len(set(owners[id(p)])) > 1 for p in module.parameters(recurse=False))
        if not shared:
            kept[name] = style
    return kept


def plan_for(model: nn.Module, tp: TPSettings, *, whole: bool = True) -> dict[str, str]:
    """Concrete module name -> style for ``model``: the user's plan, else the model's own
    (of a ``whole`` model: a pipeline stage's patterns may name modules other stages hold)."""
    if tp.plan is not None:
        source = "ParallelismConfig(tp_plan=...)"
        plan = check_plan(tp.plan, source)
    else:
        own = model_plan(model)
        if own is None:
            raise ConfigError(
                f"tensor-parallel degree {tp.degree} ({tp.key}, from {tp.source}) needs a plan, "
                f"and {type(model).__name__} carries none",
                key=tp.key,
                fix='pass ParallelismConfig(tp_size=..., tp_plan={"<module>": "colwise", ...}) '
                "(docs/parallelism.md), or set the degree to 1",
            )
        source = f"{type(model).__name__}'s own tensor-parallel plan"
        # Its sequence-parallel entries are derived here when asked for (tp_sequence).
        own = {k: v for k, v in own.items() if v != tp_sequence.SEQ}
        plan = check_plan(own, source)
    return _untie(model, resolve(model, plan, source, whole=whole))


def layout_for(model: nn.Module, tp: TPSettings, *, whole: bool = True) -> dict[str, str]:
    """Module name -> the style applied: the plan, checked, with the sequence-parallel
    layouts added when sequence parallelism is on (empty when the plan splits nothing)."""
    check_heads(model, tp)
    names = plan_for(model, tp, whole=whole)
    if not names:
        return names
    for name, style in list(names.items()):
        module = model.get_submodule(name)
        if style == tp_sequence.SEQ:
            continue
        if not isinstance(module, (nn.Linear, nn.Embedding)):
            raise ConfigError(
                f"the tensor-parallel plan splits {name!r} ({style}), a "
                f"{type(module).__name__}; only nn.Linear and nn.Embedding modules can be split",
                key="tp_plan",
                fix="name the Linear or Embedding modules inside it (see model.named_modules())",
            )
        if isinstance(module, nn.Embedding) and style == "rowwise":
            names[name] = "rowwise_rep"  # an embedding's input (token ids) is always whole
    if tp_sequence.wanted(tp, names):
        names = tp_sequence.sequence_plan(model, names, tp)
    return names


def apply_tp(
    model: nn.Module,
    mesh: DeviceMesh,
    tp: TPSettings,
    *,
    split_locally: bool = False,
    whole: bool = True,
) -> dict[str, str]:
    """Split ``model``'s modules over ``mesh`` (1-D, the ``tp`` dimension) in place.

    Returns the plan applied (module name -> style). ``split_locally``: every process cuts
    its part out of the weights it holds, without communication (they hold the same
    weights already, or are empty and get filled afterwards); otherwise the first process
    of the tp group scatters its weights. ``whole=False``: ``model`` is a pipeline stage's
    part, so plan entries for modules other stages hold are skipped.
    """
    from torch.distributed.tensor.parallel import parallelize_module

    names = layout_for(model, tp, whole=whole)
    if not names:
        warnings.warn(
            f"the tensor-parallel plan for {type(model).__name__} splits no module; every "
            "process computes the whole model",
            UserWarning,
            stacklevel=3,
        )
        return names
    styles = {name: _style(style) for name, style in names.items()}
    plan = {n: s for n, s in styles.items() if s is not None}
    parallelize_module(model, mesh, plan, src_data_rank=None if split_locally else 0)
    if tp_sequence.wanted(tp, names):
        tp_sequence.add_hooks(model, mesh, names, tp)
    else:  # (under sequence parallelism the blocks gather their inputs once already)
        share_colwise_inputs(model, mesh, names, tp_sequence.blocks(model, names))
    return names
