"""Pipeline-parallel inference: split any model PyTorch can trace at named modules, run one stage
per process, and stream micro-batches through them (``torch.distributed.pipelining``'s tracer
and GPipe schedule).

The training pipeline (``pipeline.py``) splits by repeated layers of known model shapes; here
the split points are module paths of any traceable model, as Hugging Face Accelerate's
``prepare_pippy`` takes them. A traced stage receives tensors of the shapes it was traced
with, so ``InferencePipeline`` traces again (every process alike) when a call's micro-batch
differs from every one it has seen, instead of hanging on a mismatched receive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

import torch
from torch import nn

from overdrive.errors import OverdriveError

if TYPE_CHECKING:
    from torch.distributed.pipelining import ScheduleGPipe
    from torch.utils._pytree import TreeSpec

T = TypeVar("T")
Args: TypeAlias = tuple[object, ...]
Kwargs: TypeAlias = dict[str, object]


def batch_size(data: object) -> int | None:
    """The first dimension of the first tensor found (the first element of a list or tuple,
    the first value of a mapping), or None where there is none."""
    while isinstance(data, (list, tuple, Mapping)):
        if len(data) == 0:
            return None
        data = next(iter(data.values())) if isinstance(data, Mapping) else data[0]
    if isinstance(data, torch.Tensor) and data.dim() > 0:
        return int(data.shape[0])
    return None


def find_batch_size(
    args: Sequence[object] | None, kwargs: Mapping[str, object] | None
) -> int | None:
    """The batch size of the first positional argument that has one, else of the first
    keyword argument that has one; None when no argument holds a tensor."""
    for value in [*(args or ()), *(kwargs or {}).values()]:
        found = batch_size(value)
        if found is not None:
            return found
    return None


def _map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], data: T) -> T:
    """``data`` with each tensor leaf replaced by ``fn`` of it (the same structure)."""
    from torch.utils._pytree import tree_map

    return cast("T", tree_map(lambda x: fn(x) if isinstance(x, torch.Tensor) else x, data))


def pad_batch(data: T, batch: int, multiple: int) -> T:
    """Tensors whose first dimension is ``batch`` padded with zero rows up to a multiple of
    ``multiple``; every other leaf unchanged."""
    target = -(-batch // multiple) * multiple

    def pad(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or t.shape[0] != batch or target == batch:
            return t
        return torch.cat([t, t.new_zeros((target - batch, *t.shape[1:]))])

    return _map_tensors(pad, data)


def trim_batch(data: T, padded: int, batch: int) -> T:
    """The padding rows ``pad_batch`` added taken off again (tensors of ``padded`` rows)."""
    if padded == batch:
        return data
    return _map_tensors(lambda t: t[:batch] if t.dim() and t.shape[0] == padded else t, data)


_MARKS = ("forward", "_orig_forward")


class _FedFromFirst(nn.Module):
    """``model`` whose inputs all enter the first stage: each input tensor is copied there, so
    an input that a later stage reads (a mask, a bias) travels to it from stage 0, as only
    the first stage is given the call's inputs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: object, **kwargs: object) -> object:
        args, kwargs = _map_tensors(torch.clone, (args, kwargs))
        return self.model(*args, **kwargs)


def build_schedule(
    model: nn.Module,
    split_points: Sequence[str],
    mb_args: Args,
    mb_kwargs: Kwargs | None,
    num_chunks: int,
    *,
    stage_index: int,
    num_stages: int,
    device: torch.device,
) -> ScheduleGPipe:
    """Trace ``model`` on one micro-batch, split it before each of ``split_points`` and return
    the GPipe schedule of stage ``stage_index`` (its modules moved to ``device``)."""
    from torch.distributed.pipelining import ScheduleGPipe, SplitPoint, pipeline

    if len(split_points) + 1 != num_stages:
        raise OverdriveError(
            f"{len(split_points)} split points make {len(split_points) + 1} pipeline stages, "
            f"and there are {num_stages} processes (one stage each)\n"
            f"  fix: give {num_stages - 1} split points, or split_points='auto'"
        )
    names = {name for name, _ in model.named_modules()}
    unknown = [p for p in split_points if p not in names]
    if unknown:
        raise OverdriveError(
            f"split points {unknown} are not modules of {type(model).__name__}\n"
            "  fix: name modules as model.named_modules() does, e.g. 'model.layers.4'"
        )
    spec = {f"model.{point}": SplitPoint.BEGINNING for point in split_points}
    # The tracer marks each split point by replacing its module's forward; put them back after,
    # so the model runs as before and can be traced again.
    marked = [model.get_submodule(point) for point in split_points]
    before = [{k: m.__dict__[k] for k in _MARKS if k in m.__dict__} for m in marked]
    try:
        pipe = pipeline(_FedFromFirst(model), mb_args=mb_args, mb_kwargs=mb_kwargs, split_spec=spec)
    finally:
        for module, attributes in zip(marked, before, strict=True):
            for key in _MARKS:
                module.__dict__.pop(key, None)
            module.__dict__.update(attributes)
    if pipe.num_stages != num_stages:
        raise OverdriveError(
            f"splitting {type(model).__name__} at {list(split_points)} gave {pipe.num_stages} "
            f"stages, not {num_stages}: a split point that forward never calls splits nothing\n"
            "  fix: split at modules forward calls, in the order it calls them"
        )
    stage = pipe.build_stage(stage_index, device=device)
    return ScheduleGPipe(stage, num_chunks)


def _describe(data: object) -> tuple[str | TreeSpec, list[object]]:
    """(structure, leaves) with each tensor leaf replaced by its (shape, dtype)."""
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten(data)
    return _spec_text(spec), [
        ("tensor", tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in leaves
    ]


def _spec_text(spec: TreeSpec) -> str | TreeSpec:
    """A tree structure as JSON text where it has one (sent as plain data, compared as text)."""
    from torch.utils._pytree import treespec_dumps

    try:
        return treespec_dumps(spec)
    except (TypeError, NotImplementedError, ValueError):
        return spec


def _spec(text: str | TreeSpec) -> TreeSpec:
    from torch.utils._pytree import treespec_loads

    return treespec_loads(text) if isinstance(text, str) else text


def _broadcast_object(obj: T | None, src: int) -> T:
    """``obj`` of process ``src`` on every process (the others pass None); collective."""
    import torch.distributed as dist

    box: list[object] = [obj]
    dist.broadcast_object_list(box, src=src)
    return cast("T", box[0])


def broadcast_tree(data: object, src: int, device: torch.device) -> object:
    """``data`` (tensors in lists, tuples and dicts) from process ``src`` on every process:
    its structure as a small object, then each tensor; collective."""
    import torch.distributed as dist
    from torch.utils._pytree import tree_flatten, tree_unflatten

    mine = dist.get_rank() == src
    spec, described = _broadcast_object(_describe(data) if mine else None, src)
    values = tree_flatten(data)[0] if mine else [None] * len(described)
    leaves: list[object] = []
    for value, desc in zip(values, described, strict=True):
        if not (isinstance(desc, tuple) and len(desc) == 3 and desc[0] == "tensor"):
            leaves.append(desc)
            continue
        tensor = value.contiguous() if mine else torch.empty(desc[1], dtype=desc[2])
        wire = tensor.to(device)
        dist.broadcast(wire, src=src)
        leaves.append(wire)
    return tree_unflatten(leaves, _spec(spec))


class InferencePipeline:
    """The pipelined forward ``prepare_pippy`` puts on a model: process 0's inputs go through
    every stage in ``num_chunks`` micro-batches; the last process gets the output (every
    process with ``gather_output``), the others None. One process runs the model whole."""

    def __init__(
        self,
        model: nn.Module,
        split_points: Sequence[str],
        num_chunks: int,
        gather_output: bool,
        *,
        rank: int,
        world: int,
        device: torch.device,
    ) -> None:
        self.model = model
        self.forward = model.forward  # the model's own, captured before it is replaced
        self.split_points = list(split_points)
        self.num_chunks = num_chunks
        self.gather_output = gather_output
        self.rank, self.world, self.device = rank, world, device
        self.schedules: dict[str, ScheduleGPipe] = {}
        self.schedule: ScheduleGPipe | None = None  # the last one used

    def prepare(self, mb_args: Args, mb_kwargs: Kwargs | None) -> ScheduleGPipe:
        """Trace on the given example micro-batch (the same on every process); returns the
        schedule."""
        return self._schedule(mb_args, mb_kwargs or {})

    def _key(self, mb_args: Iterable[object], mb_kwargs: Mapping[str, object]) -> str:
        return repr(_describe((tuple(mb_args), dict(mb_kwargs))))

    def _schedule(self, mb_args: Args, mb_kwargs: Kwargs) -> ScheduleGPipe:
        key = self._key(mb_args, mb_kwargs)
        if key not in self.schedules:
            own = self.model.__dict__.pop("forward", None)  # trace the model's own forward
            try:
                self.schedules[key] = build_schedule(
                    self.model,
                    self.split_points,
                    tuple(_map_tensors(lambda t: t.to("cpu"), mb_args)),
                    _map_tensors(lambda t: t.to("cpu"), mb_kwargs) or None,
                    self.num_chunks,
                    stage_index=self.rank,
                    num_stages=self.world,
                    device=self.device,
                )
            finally:
                if own is not None:
                    self.model.forward = own
        self.schedule = self.schedules[key]
        return self.schedule

    def __call__(self, *args: object, **kwargs: object) -> object:
        if self.world == 1:
            return self.forward(*args, **kwargs)
        first, last = self.rank == 0, self.rank == self.world - 1
        call: tuple[int, int, str] | None = None
        if first:
            batch = find_batch_size(args, kwargs)
            if batch is None:
                raise ValueError("Could not find batch size from args or kwargs")
            args, kwargs = pad_batch((args, kwargs), batch, self.num_chunks)
            padded = -(-batch // self.num_chunks) * self.num_chunks
            mb_args, mb_kwargs = _first_micro_batch((args, kwargs), padded, self.num_chunks)
            call = (batch, padded, self._key(mb_args, mb_kwargs))
        # Every process learns the micro-batch's shapes; an unseen one is traced again by all.
        batch, padded, key = _broadcast_object(call, 0)
        if key not in self.schedules:
            self._schedule(*_broadcast_object((mb_args, mb_kwargs) if first else None, 0))
        schedule = self.schedules[key]
        self.schedule = schedule
        if first:
            on_device = _map_tensors(lambda t: t.to(self.device), (args, kwargs))
            step: Callable[..., object] = schedule.step  # the model's own arguments, as given
            output = step(*on_device[0], **on_device[1])
        else:
            output = schedule.step()
        output = trim_batch(output, padded, batch) if last else None
        if self.gather_output:
            output = broadcast_tree(output, self.world - 1, self.device)
        return output


def _first_micro_batch(data: T, padded: int, chunks: int) -> T:
    """The first of ``chunks`` equal micro-batches of ``data`` (tensors of ``padded`` rows)."""
    size = padded // chunks
    return _map_tensors(lambda t: t[:size] if t.dim() and t.shape[0] == padded else t, data)
