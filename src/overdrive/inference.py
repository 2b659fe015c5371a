"""``accelerate.inference``: pipeline-parallel inference (Hugging Face Accelerate's
``prepare_pippy``) on ``torch.distributed.pipelining``, one stage per process.

The work is in ``overdrive.parallel.pipeline_inference`` (tracing, stages, the pipelined call)
and ``overdrive.parallel.stage_balance`` (where to split); this module adapts Accelerate's
arguments. Where overdrive differs on purpose (noted per function): the pipeline spans every
process (stage = process index), the padding rows a call adds are taken off its output, a
call whose micro-batch shape differs from the traced one is traced again instead of hanging,
and one process runs the model whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from overdrive.parallel.pipeline_inference import (
    InferencePipeline,
    broadcast_tree,
    build_schedule,
    find_batch_size,
    pad_batch,
)
from overdrive.parallel.stage_balance import balanced_device_map, split_points_from_map
from overdrive.processes.process_state import PartialState
from overdrive.utils.modeling import infer_auto_device_map

__all__ = [
    "build_pipeline",
    "find_pippy_batch_size",
    "generate_device_map",
    "pippy_forward",
    "prepare_pippy",
]


def _state() -> Any:
    return PartialState()


def generate_device_map(
    model: nn.Module,
    num_processes: int = 1,
    no_split_module_classes: list[str] | None = None,
    max_memory: dict | None = None,
) -> dict[str, Any]:
    """Module paths -> process index, splitting ``model`` into ``num_processes`` consecutive
    parts of about equal size (a tenth of slack each, or ``max_memory[i]`` bytes for part
    ``i``), never inside a class named in ``no_split_module_classes``. With one process,
    ``infer_auto_device_map``'s answer."""
    if num_processes == 1:
        return infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            clean_result=False,
        )
    return dict(balanced_device_map(model, num_processes, no_split_module_classes, max_memory))


def find_pippy_batch_size(args: Any, kwargs: Any) -> int | None:
    """The batch size of the first positional argument holding a tensor, else of the first
    such keyword argument; None when none does."""
    return find_batch_size(args, kwargs)


def build_pipeline(
    model: nn.Module, split_points: list[str], args: Any, kwargs: Any, num_chunks: int
) -> Any:
    """Trace ``model`` on the example micro-batch ``args`` / ``kwargs`` (the same on every
    process), split it before each module in ``split_points`` and return this process's
    stage's GPipe schedule over ``num_chunks`` micro-batches. The number of stages must equal
    the number of processes (an error otherwise, where Hugging Face Accelerate would hang)."""
    state = _state()
    return build_schedule(
        model,
        list(split_points),
        tuple(args or ()),
        dict(kwargs) if kwargs else None,
        num_chunks,
        stage_index=state.process_index,
        num_stages=state.num_processes,
        device=torch.device(state.device),
    )


def pippy_forward(
    forward: Callable[..., Any], num_chunks: int, gather_output: bool, *args: Any, **kwargs: Any
) -> Any:
    """Run a pipeline schedule's ``forward`` (``schedule.step``) on every process: the first
    process feeds the inputs (padded with zero rows to a multiple of ``num_chunks``), the last
    gets the output, the others None; with ``gather_output`` every process gets it. One
    process calls ``forward(*args, **kwargs)`` as is. Unlike Hugging Face Accelerate, the
    output is shared from the last process whichever process it is."""
    state = _state()
    if state.num_processes == 1:
        return forward(*args, **kwargs)
    output = None
    if state.process_index == 0:
        batch = find_batch_size(args, kwargs)
        if batch is None:
            raise ValueError("Could not find batch size from args or kwargs")
        args, kwargs = pad_batch((args, kwargs), batch, num_chunks)
        forward(*args, **kwargs)
    elif state.is_last_process:
        output = forward()
    else:
        forward()
    if gather_output:
        output = broadcast_tree(output, state.num_processes - 1, torch.device(state.device))
    return output


def prepare_pippy(
    model: nn.Module,
    split_points: str | list[str] | None = "auto",
    no_split_module_classes: list[str] | None = None,
    example_args: tuple[Any, ...] | None = (),
    example_kwargs: dict[str, Any] | None = None,
    num_chunks: int | None = None,
    gather_output: bool | None = False,
) -> nn.Module:
    """Make ``model`` run pipeline-parallel for inference; call it on every process with the
    same model and example inputs. Returns ``model``, whose forward now pipelines.

    ``split_points``: module paths where stages 1, 2, ... begin, or ``"auto"`` for parts of
    about equal size (``generate_device_map``). ``example_args`` / ``example_kwargs``: one
    micro-batch of inputs to trace with. ``num_chunks`` (default: the number of processes):
    micro-batches per call. ``gather_output``: every process gets the output, not only the
    last. Calls take process 0's inputs; the last process returns the output (without the
    rows padding to a multiple of ``num_chunks`` added), the others None.

    Differences from Hugging Face Accelerate, on purpose: stage ``i`` is process ``i`` over all
    processes and the automatic split always makes one stage per process (``num_chunks`` only
    sets micro-batches); a call with another micro-batch shape is traced again on every
    process (Accelerate's stages would wait for tensors of the old shape); on one process the
    model runs whole (``model.pippy_stage`` is None).
    """
    state = _state()
    world = state.num_processes
    chunks = num_chunks if num_chunks is not None else world
    if split_points == "auto" or split_points is None:
        device_map = balanced_device_map(model, world, no_split_module_classes) if world > 1 else {}
        points = split_points_from_map(model, device_map, world) if world > 1 else []
    else:
        points = [split_points] if isinstance(split_points, str) else list(split_points)
    pipeline = InferencePipeline(
        model,
        points,
        chunks,
        bool(gather_output),
        rank=state.process_index,
        world=world,
        device=torch.device(state.device),
    )
    schedule = None
    if world > 1:
        cpu = torch.device("cpu")
        args = _to(tuple(example_args or ()), cpu)
        kwargs = _to(dict(example_kwargs or {}), cpu)
        schedule = pipeline.prepare(args, kwargs)
    held: Any = model  # plain attributes Hugging Face Accelerate's callers read
    held.hf_split_points = points
    held._original_forward = model.forward
    held._original_call = model.__call__
    held.pippy_stage = schedule
    held.pippy_pipeline = pipeline

    def forward(*args: Any, **kwargs: Any) -> Any:
        output = pipeline(*args, **kwargs)
        held.pippy_stage = pipeline.schedule
        return output

    # ``__wrapped__`` leads to the model's own forward, so unwrapping code takes the pipeline
    # off (Hugging Face Accelerate points it at a method wrapping itself, which loops).
    setattr(forward, "__wrapped__", held._original_forward)  # noqa: B010
    held.forward = forward
    return model


def _to(data: Any, device: torch.device) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, data)
