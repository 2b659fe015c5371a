"""Sequence parallelism: between the tensor-parallel blocks, activations are split over the
sequence (dim 1) across the tp processes, so per-token modules (norms) run on a slice.

The layouts follow torchtitan's Llama plan, built from PyTorch's parallel styles:

* norms: ``SequenceParallel`` (weights replicated, input and output ``Shard(1)`` DTensors);
* rowwise Linears: ``RowwiseParallel(output_layouts=Shard(1))`` (reduce-scatter instead of
  all-reduce), kept as DTensors so the residual stream knows it is split;
* the input embedding: ``RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))``
  when the plan splits it, else ``PrepareModuleOutput`` slices its whole output;
* a block holding colwise and rowwise Linears (attention, MLP), and every colwise Linear:
  sequence-split DTensor inputs are gathered (``Replicate``) before it runs;
* an LM head the plan leaves whole (tied embeddings) gathers its input to a plain tensor;
* the model's outputs (and a transformers base model's): any DTensor left is gathered
  whole, so the loss is the unsplit one.

Plain tensors between modules are always whole; a split activation is always a DTensor.
The norms' weight gradients come from sequence slices: DTensor leaves them ``Partial`` (a
sum still to be taken over the tp group). Once accumulated they are reduced to the weight's
own ``Replicate`` layout, so optimizers and clipping see whole values (under FSDP2 the
parameters are FSDP's, which redistributes gradients to the tp layout itself).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import nn

from overdrive.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ParallelStyle

    from overdrive.parallel.tp_settings import TPSettings

SEQ = "sequence_parallel"
ROW_SEQ = "rowwise_seq"  # rowwise whose output is split over the sequence
ROW_REP_SEQ = "rowwise_rep_seq"  # whole input (token ids), output split over the sequence
SHARD_OUT = "shard_output"  # a whole module (tied embedding) whose output is then split
GATHER_IN = "gather_input"  # a block whose split inputs are gathered (Replicate DTensors)
GATHER_LOCAL = "gather_input_local"  # a whole module (tied head): inputs gathered, plain
STYLES = (SEQ, ROW_SEQ, ROW_REP_SEQ, SHARD_OUT, GATHER_IN, GATHER_LOCAL)
_NORM_SUFFIXES = ("LayerNorm", "RMSNorm", "Norm")


def wanted(tp: TPSettings, names: dict[str, str]) -> bool:
    """Sequence parallelism is on: asked for in the settings, or the plan names a module."""
    return tp.sequence_parallel or SEQ in names.values()


def style(name: str) -> ParallelStyle | None:
    """The PyTorch parallel style for one of this module's plan entries (None: hooks only)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    if name == SEQ:
        return SequenceParallel()
    if name == ROW_SEQ:
        return RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
    if name == ROW_REP_SEQ:
        return RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False
        )
    if name == SHARD_OUT:
        return PrepareModuleOutput(
            output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=False
        )
    return None


def _where(tp: TPSettings) -> tuple[str, str]:
    """(setting, where it came from) that turned sequence parallelism on."""
    if tp.sequence_parallel:
        return tp.sp_key, tp.sp_source
    return "tp_plan", "a sequence_parallel entry of ParallelismConfig(tp_plan=...)"


def _is_norm(module: nn.Module) -> bool:
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
        return True
    if isinstance(module, nn.GroupNorm):  # normalises over channels, not each token
        return False
    return type(module).__name__.endswith(_NORM_SUFFIXES) and not any(
        isinstance(m, (nn.Linear, nn.Embedding)) for m in module.modules()
    )


def blocks(model: nn.Module, names: dict[str, str]) -> list[str]:
    """Modules (not the root) with a colwise and a rowwise child, holding no SP entry."""
    out = []
    for name, module in model.named_modules():
        if not name:
            continue
        kids = {names.get(f"{name}.{k}") for k, _ in module.named_children()}
        inner = [n for n in names if n.startswith(f"{name}.")]
        if {"colwise", "rowwise"} <= kids and not any(names[n] == SEQ for n in inner):
            out.append(name)
    return out


def _inside(name: str, parents: list[str]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in parents)


def _name_of(model: nn.Module, target: object) -> str | None:
    for name, module in model.named_modules():
        if module is target and name:
            return str(name)
    return None


def _embedding(model: nn.Module) -> str | None:
    getter = getattr(model, "get_input_embeddings", None)
    found = getter() if callable(getter) else None
    if isinstance(found, nn.Embedding):
        return _name_of(model, found)
    embeddings = [n for n, m in model.named_modules() if isinstance(m, nn.Embedding)]
    return embeddings[0] if len(embeddings) == 1 else None


def _head(model: nn.Module) -> str | None:
    getter = getattr(model, "get_output_embeddings", None)
    found = getter() if callable(getter) else None
    return _name_of(model, found) if isinstance(found, nn.Linear) else None


def _refuse(model: nn.Module, tp: TPSettings, what: str) -> ConfigError:
    return ConfigError(
        f"sequence parallelism ({tp.sp_key}, from {tp.sp_source}) cannot lay out "
        f"{type(model).__name__}: {what}",
        key=tp.sp_key,
        fix="turn sequence parallelism off, or give the plan yourself with sequence_parallel "
        "entries (ParallelismConfig(tp_plan=...), docs/parallelism.md)",
    )


def _derive(model: nn.Module, names: dict[str, str], tp: TPSettings) -> dict[str, str]:
    """The SP entries of a model the settings ask to run sequence-parallel."""
    found = blocks(model, names)
    if not found:
        raise _refuse(model, tp, "its plan has no block of colwise then rowwise Linears")
    planned = list(names) + found
    norms = [n for n, m in model.named_modules() if n and _is_norm(m) and not _inside(n, planned)]
    if not norms:
        raise _refuse(model, tp, "no LayerNorm/RMSNorm outside the attention and MLP blocks")
    embedding = _embedding(model)
    if embedding is None:
        raise _refuse(model, tp, "no input embedding (the sequence must start split there)")
    if names.get(embedding, "rowwise_rep") != "rowwise_rep":
        raise _refuse(
            model,
            tp,
            f"its plan splits the input embedding {embedding!r} "
            f"{names[embedding]}, so its output is split over features, not the sequence",
        )
    head = _head(model)
    known = planned + norms + [embedding] + ([head] if head else [])
    stray = [
        f"{n} ({type(m).__name__})"
        for n, m in model.named_modules()
        if n and not _inside(n, known) and any(True for _ in m.parameters(recurse=False))
    ]
    if stray:
        raise _refuse(model, tp, f"modules with weights it does not recognise: {stray}")
    out = {n: SEQ for n in norms}
    if embedding not in names:
        out[embedding] = SHARD_OUT
    if head is not None and head not in names:
        out[head] = GATHER_LOCAL
    return out


def sequence_plan(model: nn.Module, names: dict[str, str], tp: TPSettings) -> dict[str, str]:
    """``names`` (module -> tp style) with the sequence-parallel layouts added."""
    user = SEQ in names.values()
    for name, kind in names.items():
        module = model.get_submodule(name)
        if kind == SEQ and any(True for kid in module.children() for _ in kid.parameters()):
            raise ConfigError(
                f"ParallelismConfig(tp_plan=...) names {name!r} ({type(module).__name__}) "
                "sequence_parallel, but it "
                "holds submodules with weights; the style replicates one module's own weights",
                key="tp_plan",
                fix="name the norm modules inside it (see model.named_modules())",
            )
    out = dict(names) if user else {**names, **_derive(model, names, tp)}
    for name, kind in names.items():
        if kind == "rowwise":
            out[name] = ROW_SEQ
        elif kind == "rowwise_rep":
            out[name] = ROW_REP_SEQ
    for name in blocks(model, names):
        out.setdefault(name, GATHER_IN)
    return out


def _gather(value: object, local: bool) -> object:
    from torch.distributed.tensor import DTensor, Replicate

    if not isinstance(value, DTensor):
        return value
    if all(p.is_replicate() for p in value.placements):
        # Redistributing a whole value to itself still adds an autograd node, whose backward
        # all-reduces each Linear's partial input gradient on its own: a block's colwise
        # Linears would each send a whole activation, where their summed gradient needs one
        # reduce-scatter at the block's gather.
        return value.to_local() if local else value
    if local:
        return value.full_tensor()
    return value.redistribute(placements=[Replicate()] * value.device_mesh.ndim)


def _gather_inputs(
    local: bool, module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[tuple[object, ...], dict[str, object]]:
    args = tuple(_gather(a, local) for a in args)
    return args, {k: _gather(v, local) for k, v in kwargs.items()}


def _gather_outputs(module: nn.Module, args: tuple[object, ...], output: object) -> object:
    if isinstance(output, torch.Tensor):
        return _gather(output, True)
    if isinstance(output, tuple) and not hasattr(output, "_fields"):
        return tuple(_gather(o, True) for o in output)
    if isinstance(output, list):
        return [_gather(o, True) for o in output]
    if isinstance(output, dict):  # transformers' ModelOutput too (a dict that sets attributes)
        for key, value in list(output.items()):
            if isinstance(value, torch.Tensor):
                output[key] = _gather(value, True)
    return output


def _split_whole(
    mesh: DeviceMesh, module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[tuple[object, ...], dict[str, object]] | None:
    """A plain input of a ``SequenceParallel`` module is whole: mark it so (the style would
    take it for this process's slice), and the style then keeps this process's slice."""
    from torch.distributed.tensor import DTensor, Replicate

    if args and isinstance(args[0], torch.Tensor) and not isinstance(args[0], DTensor):
        whole = DTensor.from_local(args[0], mesh, [Replicate()], run_check=False)
        return (whole, *args[1:]), kwargs
    return None


def _reduce_partial_grad(param: torch.Tensor) -> None:
    from torch.distributed.tensor import DTensor

    grad = param.grad
    if isinstance(grad, DTensor) and any(p.is_partial() for p in grad.placements):
        with torch.no_grad():
            param.grad = grad.redistribute(placements=param.placements)  # type: ignore[attr-defined]


def check_length(
    degree: int,
    where: tuple[str, str],
    name: str,
    module: nn.Module,
    args: tuple[object, ...],
    kwargs: dict[str, object],
) -> None:
    """A forward pre-hook: the whole input about to be split over the sequence has one
    (dim 1; token ids ``(batch, sequence)``, activations ``(batch, sequence, ...)``) that
    ``degree`` divides."""
    from torch.distributed.tensor import DTensor

    values = list(args) + list(kwargs.values())
    first = next((v for v in values if isinstance(v, torch.Tensor)), None)
    if first is None or isinstance(first, DTensor):
        return
    least = 2 if isinstance(module, nn.Embedding) else 3
    if first.ndim >= least and first.shape[1] % degree == 0:
        return
    key, source = where
    raise ConfigError(
        f"sequence parallelism ({key}, from {source}) splits dim 1 (the sequence) of "
        f"the input of {name!r} over {degree} processes, and that input has shape "
        f"{tuple(first.shape)}",
        key=key,
        fix=f"feed (batch, sequence, ...) inputs whose sequence length {degree} divides (pad "
        "the batch), or turn sequence parallelism off",
    )


def add_hooks(model: nn.Module, mesh: DeviceMesh, names: dict[str, str], tp: TPSettings) -> None:
    """The hooks around the parallel styles: gathers, the output gather, length checks."""
    where = _where(tp)
    for name, kind in names.items():
        module = model.get_submodule(name)
        if kind in ("colwise", "colwise_rep", GATHER_IN, GATHER_LOCAL):
            hook = partial(_gather_inputs, kind == GATHER_LOCAL)
            module.register_forward_pre_hook(hook, prepend=True, with_kwargs=True)
        if kind == SEQ:
            split = partial(_split_whole, mesh)
            module.register_forward_pre_hook(split, prepend=True, with_kwargs=True)
            for param in module.parameters():
                param.register_post_accumulate_grad_hook(_reduce_partial_grad)
        if kind in (SEQ, ROW_SEQ, ROW_REP_SEQ, SHARD_OUT):
            check = partial(check_length, tp.degree, where, name)
            module.register_forward_pre_hook(check, prepend=True, with_kwargs=True)
    # transformers' base model too: called on its own it also returns whole hidden states
    # (the head gathers its input anyway, so this costs nothing more).
    base = getattr(model, str(getattr(model, "base_model_prefix", "")), None)
    for root in (model, base) if isinstance(base, nn.Module) and base is not model else (model,):
        root.register_forward_hook(_gather_outputs)
