"""Context parallelism in the loop: ``accelerator.maybe_context_parallel(buffers=[...])``.

The data-path piece of context parallelism (the layout's ``cp`` dimension; its settings and
refusals are ``parallel/cp_rules.py``; FSDP2 shards over ``dp_shard`` x ``cp``,
``parallel/mesh.py``). As in Hugging Face Accelerate, the loop opens the block around each
step with the batch's tensors: inside it torch's ``context_parallel`` keeps this rank's two
chunks of every buffer's sequence (head and tail, for causal load balance) and runs SDPA as
ring attention over the ``cp`` ranks, which pass keys and values round by
``cp_comm_strategy``. The parallelize chain's context-parallel step
(``ContextParallelStep``) readies each model that trains when it is prepared: it is checked
(SDPA attention, no sliding-window layers) and its ``*self_attn`` modules get a hook that,
inside a block only, drops the attention mask for ``is_causal=True`` (ring attention takes
no mask) when the mask asks for no more than causal attention, and refuses it otherwise; the
model itself refuses an ``attention_mask`` with padding (``parallel/cp_masks.py``), and a
transformers model called in a block without ``position_ids`` is refused (it would number
each chunk from 0). A block readies the models given to it the same way when
the chain did not (evaluation-only models).

torch 2.13 dispatches ring attention for the CUDA kernels only (flash, memory-efficient,
cuDNN); on CPU, SDPA runs ``aten._scaled_dot_product_flash_attention_for_cpu``, which has no
DTensor sharding rule, so the block stops with "does not have a sharding strategy
registered". Here the CPU flash kernel and its backward are given the same ring (torch's own
``_templated_ring_attention`` loops, with the CPU kernel as the local attention) for the
block's duration, so CPU processes run the same algorithm as GPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from overdrive.environment.rank_logging import get_logger
from overdrive.errors import ConfigError
from overdrive.parallel.cp_masks import refuse_padding, refuse_strict_mask
from overdrive.parallel.cp_rules import CP_COMM_KEY, CP_KEY, check_sequence_length

if TYPE_CHECKING:
    from torch._ops import OpOverload
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor

    from overdrive.config.settings import Settings

SEQ_DIM = 2  # of q, k, v: (batch, heads, sequence, head_dim)
_open_blocks = 0  # blocks open in this process: the attention-mask hook acts inside one only
_open_mesh: DeviceMesh | None = None  # the open block's cp mesh, where its processes agree
_HOOKED = "_overdrive_cp_hooked"
_told_not_enabled = False


def say_not_enabled() -> None:
    """Once per process, as Hugging Face Accelerate: the block does nothing without a
    context-parallel degree."""
    global _told_not_enabled
    if not _told_not_enabled:
        _told_not_enabled = True
        get_logger("overdrive").warning(
            "Context parallel training is not enabled. This context manager will have no "
            "effect. To enable it, set `parallelism_config.cp_size` > 1 in the `Accelerator` "
            "constructor."
        )


def check_model(model: nn.Module, cp: int, source: str) -> None:
    """Refuse a model ring attention cannot run: attention other than SDPA, or layers whose
    mask is stricter than causal (sliding-window, chunked), which would silently train as
    full causal attention once the mask is dropped."""
    config = getattr(model, "config", None)
    if config is None:
        return  # not a transformers model: its attention must call SDPA itself
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    impl = getattr(config, "_attn_implementation", None)
    name = type(model).__name__
    if impl is not None and impl != "sdpa":
        raise ConfigError(
            f"{name} runs attention with {impl!r}; context parallelism ({CP_KEY} = {cp}, from "
            f"{source}) runs ring attention in place of torch's scaled_dot_product_attention "
            "only",
            key="attn_implementation",
            fix=f'build or load the model with attn_implementation="sdpa", or set {CP_KEY} to 1',
        )
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        stricter = sorted({t for t in layer_types if t != "full_attention"})
    else:
        stricter = ["sliding_attention"] if getattr(config, "sliding_window", None) else []
    if stricter:
        raise ConfigError(
            f"{name} has attention layers of type {stricter}; context parallelism ({CP_KEY} = "
            f"{cp}, from {source}) runs full causal attention, without their masks",
            key=CP_KEY,
            fix=f"use a model with full attention in every layer, or set {CP_KEY} to 1",
        )


@dataclass(frozen=True)
class ContextParallelStep:
    """The parallelize chain's context-parallel step: ready a model for ring attention over
    ``cp`` processes (``parallelism_config_cp_size``, set in ``source``)."""

    cp: int
    source: str

    def apply(self, model: nn.Module) -> None:
        """Refuse a model ring attention cannot run, and hook its attention modules."""
        check_model(model, self.cp, self.source)
        hook_attention(model)


def _drop_mask(
    module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[tuple[object, ...], dict[str, object]]:
    if _open_blocks and "attention_mask" in kwargs:
        refuse_strict_mask(kwargs["attention_mask"], type(module).__name__, _open_mesh)
        kwargs["attention_mask"] = None
        kwargs["is_causal"] = True
    return args, kwargs


def _no_padding(module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    if _open_blocks:
        refuse_padding(module, args, kwargs, _open_mesh)


def _need_positions(module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    if not _open_blocks:
        return
    import inspect

    try:
        given = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return  # a call its forward does not take: the model says so itself
    if "position_ids" in inspect.signature(module.forward).parameters and (
        given.get("position_ids") is None
    ):
        raise ConfigError(
            f"{type(module).__name__} was called inside maybe_context_parallel without "
            "position_ids: it would number each process's chunks from 0, not by their place "
            "in the sequence",
            key="position_ids",
            fix="pass position_ids=... to the model and among the block's buffers, e.g. "
            "maybe_context_parallel(buffers=[input_ids, position_ids, shift_labels], "
            "buffer_seq_dims=[1, 1, 1])",
        )


def hook_attention(model: nn.Module) -> None:
    """Inside a block, a ``*self_attn`` module is called without its mask and causal (a
    mask stricter than causal is refused), the model refuses a padding ``attention_mask``,
    and a transformers model must be given its position ids (split with the batch)."""
    if getattr(model, _HOOKED, False):
        return
    for name, module in model.named_modules():
        if name.endswith("self_attn"):
            module.register_forward_pre_hook(_drop_mask, with_kwargs=True, prepend=True)
    model.register_forward_pre_hook(_no_padding, with_kwargs=True, prepend=True)
    if getattr(model, "config", None) is not None:
        model.register_forward_pre_hook(_need_positions, with_kwargs=True, prepend=True)
    setattr(model, _HOOKED, True)


def _tensors(args: tuple[object, ...]) -> list[DTensor]:
    from torch.distributed.tensor import DTensor

    out = [a for a in args if isinstance(a, DTensor)]
    if len(out) != len(args):
        raise TypeError("context parallelism: SDPA's tensors must be DTensors in the block")
    return out


def _ring_cpu_forward(
    op_call: OpOverload, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[DTensor, ...]:
    """``_scaled_dot_product_flash_attention_for_cpu`` on DTensors sharded on the sequence:
    ring attention over their 1-D ``cp`` mesh, the CPU kernel attending each pair of chunks."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.experimental._context_parallel._attention import (
        _templated_ring_attention,
    )

    query, key, value = _tensors(args[:3])
    rest = args[3:]
    dropout_p = float(cast(float, rest[0] if rest else kwargs.get("dropout_p", 0.0)))
    is_causal = bool(rest[1] if len(rest) > 1 else kwargs.get("is_causal", False))
    if kwargs.get("attn_mask") is not None:
        raise ConfigError(
            "scaled_dot_product_attention got an attention mask inside maybe_context_parallel; "
            "ring attention takes none",
            key=CP_KEY,
            fix="call the model without attention_mask inside the block (causal attention "
            "needs none), or set parallelism_config_cp_size to 1",
        )
    mesh = query.device_mesh
    out, lse = _templated_ring_attention(
        mesh.get_group(),
        SEQ_DIM,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
        query.to_local(),
        key.to_local(),
        value.to_local(),
        is_causal=is_causal,
        dropout_p=dropout_p,
        scale=kwargs.get("scale"),
    )
    placement = [Shard(SEQ_DIM)]
    return tuple(DTensor.from_local(t, mesh, placement, run_check=False) for t in (out, lse))


def _ring_cpu_backward(
    op_call: OpOverload, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[DTensor, ...]:
    """The backward of ``_ring_cpu_forward``: torch's ring backward with the CPU kernel's."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.experimental._context_parallel._attention import (
        _templated_ring_attention_backward,
    )

    grad_out, query, key, value, out, logsumexp = _tensors(args[:6])
    dropout_p, is_causal = float(cast(float, args[6])), bool(args[7])
    mesh = query.device_mesh
    grads = _templated_ring_attention_backward(
        mesh.get_group(),
        SEQ_DIM,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        grad_out=grad_out.to_local(),
        grad_out_name="grad_out",
        query=query.to_local(),
        key=key.to_local(),
        value=value.to_local(),
        out=out.to_local(),
        logsumexp=logsumexp.to_local(),
        is_causal=is_causal,
        dropout_p=dropout_p,
        scale=kwargs.get("scale"),
    )
    placement = [Shard(SEQ_DIM)]
    return tuple(DTensor.from_local(g, mesh, placement, run_check=False) for g in grads[:3])


@contextlib.contextmanager
def _cpu_ring() -> Iterator[None]:
    """For the block: the CPU flash kernel runs as ring attention, and SDPA is held to it
    (the math fallback would compute on DTensors without the ring)."""
    from torch.distributed.tensor import DTensor
    from torch.nn.attention import SDPBackend, sdpa_kernel

    aten = torch.ops.aten
    # torch's context_parallel set this dict on entering (its own handlers added) and puts
    # the original back on leaving, so these entries last as long as the block.
    handlers = DTensor._op_dispatcher._custom_op_handlers
    handlers[aten._scaled_dot_product_flash_attention_for_cpu.default] = _ring_cpu_forward
    handlers[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = _ring_cpu_backward
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        yield


@contextlib.contextmanager
def context_parallel_block(
    cp: int,
    cp_mesh: Callable[[], DeviceMesh],
    settings: Settings,
    models: Sequence[nn.Module],
    buffers: list[torch.Tensor] | None,
    buffer_seq_dims: list[int] | None,
    no_restore_buffers: set[torch.Tensor] | None,
) -> Iterator[None]:
    """Shard ``buffers`` on their ``buffer_seq_dims`` over the ``cp`` ranks and run SDPA as
    ring attention inside; put them back on leaving, except ``no_restore_buffers``."""
    global _open_blocks, _open_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    source = str(settings.source(CP_KEY))
    if not buffers:
        raise ConfigError(
            "maybe_context_parallel() was given no buffers: context parallelism "
            f"({CP_KEY} = {cp}, from {source}) splits the batch's tensors given to it",
            key="buffers",
            fix="pass the step's tensors, e.g. maybe_context_parallel(buffers=[input_ids, "
            "position_ids, shift_labels], buffer_seq_dims=[1, 1, 1])",
        )
    dims = list(buffer_seq_dims or [])
    if len(dims) != len(buffers):
        raise ConfigError(
            f"maybe_context_parallel() got {len(buffers)} buffers and {len(dims)} buffer_seq_dims",
            key="buffer_seq_dims",
            fix="give one sequence dimension per buffer (1 for (batch, sequence) tensors)",
        )
    for i, (buffer, dim) in enumerate(zip(buffers, dims, strict=True)):
        check_sequence_length(int(buffer.shape[dim]), cp, source, f"buffers[{i}]")
    for model in models:
        check_model(model, cp, source)
        hook_attention(model)
    mesh = cp_mesh()
    set_rotate_method(str(settings[CP_COMM_KEY] or "allgather"))
    cpu = buffers[0].device.type == "cpu"
    with (
        context_parallel(
            mesh, buffers=buffers, buffer_seq_dims=dims, no_restore_buffers=no_restore_buffers
        ),
        _cpu_ring() if cpu else contextlib.nullcontext(),
    ):
        _open_blocks += 1
        outer, _open_mesh = _open_mesh, mesh
        try:
            yield
        finally:
            _open_blocks -= 1
            _open_mesh = outer
