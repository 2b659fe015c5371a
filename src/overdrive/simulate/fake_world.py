"""The pieces that let an unchanged script run as one rank of a large world in one process:
a fake process group, tensors without storage, and the few places where PyTorch needs help
with them.

- ``FakeTensorMode`` gives every tensor the script creates a shape, dtype and device but no
  storage; real tensors that reach it (made before it started) are taken as inputs.
- A value the code reads (``tensor.item()``, ``bool(tensor)``) of a fake tensor does not exist,
  unless it was computed from constants alone (``known_values``: then it is the real value);
  ``SimulatedRank`` (entered by the caller, inside this context) answers 0 for integers, ``False`` for booleans and 1.0 for floating point (1.0, not 0.0:
  an optimizer's step counter is a float tensor, and a bias correction of ``1 - beta**0``
  would divide by zero).
- ``Module.to`` on a module of fake tensors swaps every parameter even when nothing changes,
  which PyTorch refuses for tensors that others reference; moves that change nothing are
  skipped here.
- DDP checks parameter shapes across processes by reading values, and its built-in
  all-reduce reads a result the fake group does not produce: see ``_ddp_on_fake_tensors``.
- Collectives of Python objects (``all_gather_object`` ...) pickle through tensor values:
  see ``_object_collectives``.
- A pipeline stage learns its neighbours' shapes from them: see ``pipeline_meta``.
- DeepSpeed compares integers across ranks: see ``deepspeed_checks``.
- A DataLoader's worker processes, a shuffled order only rank 0 draws, and batches only
  rank 0 reads: see ``_loader_workers_outside_modes``, ``_shuffled_batches_drawn_by_each_rank``
  and ``_dispatched_batches_read_by_each_rank``.
- DTensor's shape propagation is not the rank's work: see
  ``_sharding_propagation_unobserved``.
- ``DeviceMesh`` builds its rank table with tensor operations that need values: it is built
  outside the fake mode (it is small and holds no model data), and so are the meshes made
  from it (a dimension, flattened dimensions, FSDP2's data-parallel x tensor-parallel mesh).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import _disable_current_modes

from overdrive.data import loader as data_loader
from overdrive.data.samplers import ShardedBatchSampler
from overdrive.simulate.comms import CollectiveCounter
from overdrive.simulate.device_query import fake_device
from overdrive.simulate.flops import operator_flops
from overdrive.simulate.fsdp_chunks import lazy_chunk_with_empty
from overdrive.simulate.known_values import KnownValues
from overdrive.simulate.operator_memo import OperatorMemo
from overdrive.simulate.operator_memo import enabled as operator_memo_enabled
from overdrive.simulate.patching import patched
from overdrive.simulate.pipeline_meta import simulated_pipeline_stages

READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default)
"""The operators that read a tensor's value into Python."""


def made_up_value(tensor: torch.Tensor) -> bool | int | float:
    """The value a read of ``tensor`` gets in a simulation (see the module's docstring)."""
    if tensor.dtype == torch.bool:
        return False
    return 1.0 if tensor.dtype.is_floating_point or tensor.dtype.is_complex else 0


class SimulatedRank(CollectiveCounter):
    """The one dispatch mode of a simulated rank (each mode costs a Python call per operator):
    counts the collectives and the FLOPs (``flops``: ``flops.operator_flops``), and answers
    reads of values, which fake tensors lack."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.known = KnownValues()
        self.memo = OperatorMemo() if operator_memo_enabled() else None

    def call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """The operator, answered from an identical earlier call where it can."""
        if self.memo is None:
            return func(*args, **kwargs)
        return self.memo.call(func, args, kwargs)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        device = fake_device(func, args)
        if device is not None:
            return device
        if func in READS:
            if isinstance(args[0], FakeTensor):
                known = self.known.read(args[0])
                return made_up_value(args[0]) if known is None else known
            with unset_fake_temporarily():  # a real tensor (a mesh's rank table): its value
                return func(*args, **(kwargs or {}))
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is NotImplemented:  # a DTensor's operator: counted on its local tensors
            return out
        self.flops += operator_flops(func, args, kwargs or {}, out)
        self.known.follow(func, args, kwargs or {}, out)
        return out


def _outside_fake(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with unset_fake_temporarily():
            return function(*args, **kwargs)

    return wrapper


def _outside_modes(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run with no dispatch mode active: its tensors are real, and neither
    counted nor tracked (for arithmetic PyTorch does with small tensors)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _disable_current_modes():
            return function(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _method_outside_modes(owner: type | None, name: str) -> Iterator[None]:
    """Inside: ``owner``'s method ``name`` runs outside the simulation's modes (nothing
    changes where this torch has no such class or method)."""
    if owner is None or name not in vars(owner):
        yield
        return
    with patched(owner, name, _outside_modes(vars(owner)[name])):
        yield


def _strided_shard_sizes_by_arithmetic() -> contextlib.AbstractContextManager[None]:
    """A ``_StridedShard``'s local size and offset (FSDP2 over tensor parallelism) are
    worked out on an index tensor as long as the sharded dimension, read back element by
    element: under the fake mode each element is an operator (1.6 million of them in a
    405B-shaped save). Computed on real tensors, outside the simulation's modes."""
    from torch.distributed.tensor import placement_types

    strided = getattr(placement_types, "_StridedShard", None)
    return _method_outside_modes(strided, "local_shard_size_and_offset")


def _sharding_propagation_unobserved() -> contextlib.AbstractContextManager[None]:
    """DTensor works out an operator's output shape, the first time it meets that operator
    and those input shapes, by running it on fake tensors of the global shapes. In a real
    run those run in a fake mode of their own, unseen by a memory tracker; in a simulated
    rank they would run in the rank's fake mode and its modes would take them for the
    rank's own work (a first step counted 65% more FLOPs than the next under tensor
    parallelism, and held global-sized transients). So they run outside the rank's modes,
    as in a real run."""
    from torch.distributed.tensor import _sharding_prop

    propagator = getattr(_sharding_prop, "ShardingPropagator", None)
    return _method_outside_modes(propagator, "_propagate_tensor_meta_non_cached")


def _batches_drawn_here(self: ShardedBatchSampler) -> Iterator[list[int]]:
    return (list(batch) for batch in self._source)


@contextlib.contextmanager
def _shuffled_batches_drawn_by_each_rank() -> Iterator[None]:
    """A loader whose order only rank 0 can draw (a shuffling sampler that is not seedable)
    has rank 0 broadcast the epoch's batches. A simulated rank other than 0 learns nothing
    from a broadcast (``_object_collectives``), so each simulated rank draws the batches
    itself: as many, of the same sizes, in an order of its own (values are not simulated)."""
    with patched(ShardedBatchSampler, "_batches", _batches_drawn_here):
        yield


def _every_rank_reads(mode: str, rank: int) -> bool:
    return True


@contextlib.contextmanager
def _dispatched_batches_read_by_each_rank() -> Iterator[None]:
    """A dispatching loader (``dispatch_batches``, an iterable dataset's default) has rank 0
    read every batch and broadcast it. A simulated rank other than 0 learns nothing from a
    broadcast of objects, and would take no step: each simulated rank reads the batches
    itself, and the broadcast of each batch's tensors is still made (and counted)."""
    with patched(data_loader, "reads_the_data", _every_rank_reads):
        yield


@contextlib.contextmanager
def _loader_workers_outside_modes() -> Iterator[None]:
    """A DataLoader's worker processes (PyTorch's, torchdata's) are forked from the simulated
    rank with its dispatch modes active, so their collate would build the batch as fake
    tensors in shared memory, which fails. A worker is a process of its own that reads the
    dataset for real: a process forked from the rank leaves the rank's modes at once. The
    rank rebuilds each tensor it receives outside them too, then copies it into a tensor of
    its own, so the batch counts in its memory as one the rank read itself does."""
    from torch.multiprocessing import reductions

    _FORKED_LEAVE_MODES[:] = [True]
    try:
        rebuild = _received_as_the_rank_own(reductions.rebuild_tensor)
        with patched(reductions, "rebuild_tensor", rebuild):
            yield
    finally:
        _FORKED_LEAVE_MODES[:] = [False]


_FORKED_LEAVE_MODES = [False]
"""Whether a process forked now leaves the dispatch modes (while a rank is simulated)."""
_LEFT: list[Any] = []  # the modes' exit, kept: collected, it would enter them again


def _leave_modes_after_fork() -> None:
    if _FORKED_LEAVE_MODES[0]:
        left = _disable_current_modes()
        left.__enter__()
        _LEFT.append(left)


os.register_at_fork(after_in_child=_leave_modes_after_fork)


def _received_as_the_rank_own(rebuild: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(rebuild)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _disable_current_modes():
            received = rebuild(*args, **kwargs)
        return received.clone() if isinstance(received, torch.Tensor) else received

    return wrapper


def _apply_skipping_no_ops(original: Callable[..., Any]) -> Callable[..., Any]:
    def _apply(self: torch.nn.Module, fn: Callable[..., Any], recurse: bool = True) -> Any:
        if recurse:
            for child in self.children():
                child._apply(fn)
        own = [t for t in (*self._parameters.values(), *self._buffers.values()) if t is not None]
        with torch.no_grad():
            if all(fn(t) is t for t in own):
                return self
        return original(self, fn, recurse=False)

    return _apply


def _all_reduce_hook(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """DDP's all-reduce of one gradient bucket, issued from Python: the fake group's work
    carries no result for DDP's built-in hook to read."""
    buffer = bucket.buffer()
    dist.all_reduce(buffer)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


# DDP checks a hook's annotations as objects (this module's are strings).
_all_reduce_hook.__annotations__ = {
    "state": object,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


class _NoRebuild:
    """DDP's reducer, except that it keeps its first buckets: rebuilding them (in the second
    iteration) exchanges bucket indices by value."""

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


@contextlib.contextmanager
def _ddp_on_fake_tensors() -> Iterator[None]:
    """DDP with fake parameters: no cross-process shape check (it reads values), each bucket
    all-reduced by ``_all_reduce_hook`` (so a script's own comm hook is refused), and the
    first iteration's buckets kept (``_NoRebuild``)."""
    import torch.nn.parallel.distributed as ddp

    original_init = ddp.DistributedDataParallel.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.register_comm_hook(None, _all_reduce_hook)
        self.reducer = _NoRebuild(self.reducer)

    with (
        patched(ddp, "_verify_param_shape_across_processes", lambda *a, **k: None),
        patched(ddp.DistributedDataParallel, "__init__", init),
    ):
        yield


def _all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    object_list[:] = [obj] * len(object_list)  # every rank is taken to hold what this one does


def _gather_object(obj: Any, object_gather_list: Any = None, dst: Any = None, **_: Any) -> None:
    if object_gather_list is not None:
        object_gather_list[:] = [obj] * len(object_gather_list)


def _keep_objects(*args: Any, **kwargs: Any) -> None:
    """``broadcast_object_list`` / ``scatter_object_list``: this rank keeps its own objects."""


@contextlib.contextmanager
def _object_collectives() -> Iterator[None]:
    """Collectives of Python objects pickle through tensor values, which fake tensors lack:
    they are answered from this rank's own objects, and not counted."""
    replacements = {
        "all_gather_object": _all_gather_object,
        "gather_object": _gather_object,
        "broadcast_object_list": _keep_objects,
        "scatter_object_list": _keep_objects,
    }
    with contextlib.ExitStack() as stack:
        for name, function in replacements.items():
            stack.enter_context(patched(dist, name, function))
        yield


@contextlib.contextmanager
def _deepspeed_on_fake_tensors(stack: contextlib.ExitStack) -> Iterator[None]:
    """Once the DeepSpeed strategy is made (DeepSpeed is in use), its cross-rank checks of
    values keep their broadcasts and skip the comparison (``deepspeed_checks``)."""
    # deferred: DeepSpeed's strategy (and DeepSpeed) loads only where a script uses it
    from overdrive.simulate.deepspeed_checks import patch_deepspeed  # deferred: as above
    from overdrive.strategies.deepspeed import DeepSpeedStrategy  # deferred: as above

    original = DeepSpeedStrategy.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        patch_deepspeed(stack)

    with patched(DeepSpeedStrategy, "__init__", init):
        yield


@contextlib.contextmanager
def _fsdp2_pieces_when_read() -> Iterator[None]:
    """FSDP2 makes the one or two pieces of each parameter it reads, not one per rank
    (``fsdp_chunks``)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    if not hasattr(_fsdp_param, "_chunk_with_empty"):
        yield
        return
    with patched(_fsdp_param, "_chunk_with_empty", lazy_chunk_with_empty):
        yield


@contextlib.contextmanager
def fake_world(rank: int, world_size: int) -> Iterator[None]:
    """Inside: a fake process group of ``world_size`` with this process as ``rank``, and
    every new tensor a fake one (enter a ``SimulatedRank`` inside, for reads of values).
    The group is destroyed on the way out."""
    import torch.distributed.device_mesh as device_mesh
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    mesh = device_mesh.DeviceMesh
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(
                patched(torch.nn.Module, "_apply", _apply_skipping_no_ops(torch.nn.Module._apply))
            )
            init = device_mesh.init_device_mesh
            stack.enter_context(patched(device_mesh, "init_device_mesh", _outside_fake(init)))
            for name in ("__init__", "__getitem__", "_flatten", "_unflatten"):
                if hasattr(mesh, name):
                    stack.enter_context(patched(mesh, name, _outside_fake(getattr(mesh, name))))
            table = property(_outside_fake(vars(mesh)["mesh"].fget))  # made on each read
            stack.enter_context(patched(mesh, "mesh", table))
            stack.enter_context(_ddp_on_fake_tensors())
            stack.enter_context(_fsdp2_pieces_when_read())
            stack.enter_context(_strided_shard_sizes_by_arithmetic())
            stack.enter_context(_sharding_propagation_unobserved())
            stack.enter_context(_loader_workers_outside_modes())
            stack.enter_context(_shuffled_batches_drawn_by_each_rank())
            stack.enter_context(_dispatched_batches_read_by_each_rank())
            stack.enter_context(_object_collectives())
            stack.enter_context(simulated_pipeline_stages())
            stack.enter_context(_deepspeed_on_fake_tensors(stack))
            stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
            yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
