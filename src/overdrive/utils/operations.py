"""Hugging Face Accelerate's collective functions (``accelerate.utils.operations``).

They act on the default process group, like ``overdrive.processes.ops``, with Hugging Face Accelerate's
signatures and defaults (``reduce`` averages unless told otherwise). Setting
``state.debug = True`` on a process state makes them check shapes first and raise
``DistributedOperationException`` on every process instead of hanging.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch

from overdrive.bigmodel import moves
from overdrive.bigmodel.moves import find_device
from overdrive.ds.helpers import gathered_parameters
from overdrive.precision import outputs
from overdrive.precision.outputs import ConvertOutputsToFp32, convert_outputs_to_fp32
from overdrive.processes import nesting, ops
from overdrive.processes.nesting import (
    CannotPadNestedTensorWarning,
    concatenate,
    honor_type,
    listify,
    recursively_apply,
)
from overdrive.processes.ops import (
    CollectiveMismatchError,
    DistributedOperationException,
    is_namedtuple,
)
from overdrive.processes.process_state import current_partial_state
from overdrive.utils.dataclasses import TensorInformation

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "CannotPadNestedTensorWarning",
    "CollectiveMismatchError",
    "ConvertOutputsToFp32",
    "DistributedOperationException",
    "GatheredParameters",
    "TENSOR_INT_TO_DTYPE",
    "TENSOR_TYPE_TO_INT",
    "broadcast",
    "broadcast_object_list",
    "chained_operation",
    "concatenate",
    "convert_outputs_to_fp32",
    "convert_to_fp32",
    "copy_tensor_to_devices",
    "find_batch_size",
    "find_device",
    "gather",
    "gather_object",
    "gather_tensor_shape",
    "get_data_structure",
    "get_shape",
    "honor_type",
    "ignorant_find_batch_size",
    "initialize_tensors",
    "is_namedtuple",
    "is_tensor_information",
    "is_torch_tensor",
    "is_torch_xpu_tensor",
    "listify",
    "pad_across_processes",
    "pad_input_tensors",
    "recursively_apply",
    "reduce",
    "send_to_device",
    "slice_tensors",
    "verify_operation",
]

# The dtype codes Hugging Face Accelerate uses to send a tensor's dtype as a number.
TENSOR_TYPE_TO_INT = {
    torch.float: 1,
    torch.double: 2,
    torch.half: 3,
    torch.bfloat16: 4,
    torch.uint8: 5,
    torch.int8: 6,
    torch.int16: 7,
    torch.int32: 8,
    torch.int64: 9,
    torch.bool: 10,
}
TENSOR_INT_TO_DTYPE = {code: dtype for dtype, code in TENSOR_TYPE_TO_INT.items()}


def is_torch_tensor(tensor: Any) -> bool:
    """True for a ``torch.Tensor``."""
    return isinstance(tensor, torch.Tensor)


def is_torch_xpu_tensor(tensor: Any) -> bool:
    """True for a tensor on an Intel XPU (a device overdrive does not train on)."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xpu"


def is_tensor_information(tensor_info: Any) -> bool:
    """True for a ``TensorInformation`` (a tensor's shape and dtype, without its data)."""
    return isinstance(tensor_info, TensorInformation)


def get_data_structure(data: Any) -> Any:
    """``data`` with a ``TensorInformation`` (shape, dtype) in place of every tensor."""
    return recursively_apply(lambda t: TensorInformation(shape=t.shape, dtype=t.dtype), data)


def get_shape(data: Any) -> Any:
    """``data`` with every tensor's shape, as a list, in its place."""
    return recursively_apply(lambda t: list(t.shape), data)


def initialize_tensors(data_structure: Any) -> Any:
    """Uninitialised tensors in place of every ``TensorInformation`` in ``data_structure``."""
    return recursively_apply(
        lambda info: torch.empty(*info.shape, dtype=info.dtype),
        data_structure,
        test_type=is_tensor_information,
    )


def find_batch_size(data: Any) -> int:
    """The first dimension of the first tensor in ``data`` (depth first).

    Raises ValueError for an empty container and TypeError when the first leaf is no tensor.
    """
    if isinstance(data, (tuple, list, Mapping)) and len(data) == 0:
        raise ValueError(f"Cannot find the batch size from empty {type(data)}.")
    if isinstance(data, (tuple, list)):
        return find_batch_size(data[0])
    if isinstance(data, Mapping):
        return find_batch_size(next(iter(data.values())))
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"Can only find the batch size of tensors but got {type(data)}.")
    return int(data.shape[0])


def ignorant_find_batch_size(data: Any) -> int | None:
    """``find_batch_size``, or None where it would raise."""
    try:
        return find_batch_size(data)
    except (ValueError, TypeError):
        return None


def slice_tensors(
    data: Any,
    tensor_slice: Any,
    process_index: int | None = None,
    num_processes: int | None = None,
) -> Any:
    """``data`` with every tensor indexed by ``tensor_slice`` (the last two arguments are
    accepted and unused, as in Hugging Face Accelerate)."""
    return recursively_apply(lambda t: t[tensor_slice], data)


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Every tensor of ``tensor`` padded with zeros along dim 0 from ``batch_size`` rows to the
    next multiple of ``num_processes``, so each process gets as many rows.

    Hugging Face Accelerate's version can pad to a size that still does not divide (9 rows on
    4 processes become 11) and pads a batch that already divides; this one pads only when
    needed, and always to a multiple.
    """
    return nesting.pad_input_tensors(tensor, batch_size, num_processes, dim)


def convert_to_fp32(tensor: Any) -> Any:
    """``tensor`` (a nest) with every fp16/bf16 tensor turned into fp32."""
    return outputs.convert_to_fp32(tensor)


def _debugging() -> bool:
    if ops.world_size() < 2:
        return False

    return bool(getattr(current_partial_state(), "debug", False))


def verify_operation(function: _F) -> _F:
    """Make the collective ``function`` check, when several processes run in debug mode, that
    its first argument has the same shapes on every process and lies on the process's device;
    a mismatch raises ``DistributedOperationException`` on every process instead of a hang."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _debugging():
            return function(*args, **kwargs)
        operation = f"{function.__module__}.{function.__name__}"
        tensor = kwargs["tensor"] if "tensor" in kwargs else args[0]

        expected = current_partial_state().device.type
        found = find_device(tensor)
        if found is not None and found.type != expected:
            raise DistributedOperationException(
                f"One or more of the tensors passed to {operation} were not on the {found.type} "
                f"while the `Accelerator` is configured for {expected}. Please move it to the "
                f"{expected} before calling {operation}."
            )
        ops.check_shapes(operation, tensor)
        return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def chained_operation(function: _F) -> _F:
    """Re-raise a ``DistributedOperationException`` from ``function`` as a new one that names
    ``function`` (the first is kept as the cause)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except DistributedOperationException as error:
            operation = f"{function.__module__}.{function.__name__}"
            raise DistributedOperationException(
                f"Error found while calling `{operation}`. Please see the earlier error for "
                "more details."
            ) from error

    return wrapper  # type: ignore[return-value]


def gather_object(object: Any) -> list[Any]:
    """Every process's picklable ``object``, in rank order: lists are concatenated, other
    objects listed one per process (with one process too: a single object comes back as a
    one-item list, where Hugging Face Accelerate returns it unwrapped)."""
    return ops.gather_object(object)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Fill ``object_list`` in place (and return it) with ``from_process``'s objects."""
    return ops.broadcast_object_list(object_list, from_process)


def gather_tensor_shape(tensor: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """The shape (a 1-D int tensor) and dtype code (``TENSOR_TYPE_TO_INT``) of a tensor that
    one process holds and the others pass as None."""
    mine = None if tensor is None else (list(tensor.shape), TENSOR_TYPE_TO_INT[tensor.dtype])
    found = [item for item in ops.gather_object([mine]) if item is not None]
    if not found:
        raise ValueError("gather_tensor_shape needs a tensor on one process; every one gave None")
    shape, dtype = found[0]
    return torch.tensor(shape, dtype=torch.int), int(dtype)


@contextlib.contextmanager
def GatheredParameters(
    params: Any, modifier_rank: int | None = None, fwd_module: Any = None, enabled: bool = True
) -> Iterator[None]:
    """Inside the block, ZeRO-3 partitioned ``params`` are whole on every process (changes
    made on ``modifier_rank`` are partitioned back on exit); without ZeRO-3 partitioning it
    does nothing."""
    with gathered_parameters(params, modifier_rank, fwd_module, enabled):
        yield


def gather(tensor: Any) -> Any:
    """Concatenate ``tensor`` (or a nest of tensors) from every process along dim 0."""
    return ops.gather(tensor)


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Reduce over every process ("mean", "sum", "max", "min", "product"), times ``scale``."""
    out = ops.reduce(tensor, reduction)
    if out is tensor:  # one process: still a new tensor, as with several
        out = ops.map_tensors(lambda t: t.clone(), tensor)
    return out if scale == 1.0 else ops.map_tensors(lambda t: t * scale, out)


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Every process gets ``from_process``'s tensors."""
    return ops.broadcast(tensor, from_process)


def pad_across_processes(
    tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
) -> Any:
    """Pad along ``dim`` to the largest size any process holds (a nested tensor, which cannot
    be padded, comes back as it is, with a ``CannotPadNestedTensorWarning``)."""
    if getattr(tensor, "is_nested", False):
        warnings.warn(
            "pad_across_processes cannot pad a nested tensor; it is returned as it is",
            CannotPadNestedTensorWarning,
            stacklevel=2,
        )
        return tensor
    return ops.pad_across_processes(tensor, dim, pad_index, pad_first)


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: list[str] | str | None = None,
) -> Any:
    """Move every tensor (and every object with a ``.to``) in a nest of lists/tuples/dicts to
    ``device``; keys named in ``skip_keys`` (of dicts at any depth) are left where they are."""
    return moves.send_to_device(tensor, device, non_blocking, skip_keys)


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """The main process's ``tensor`` on every process (others pass None)."""
    box = [tensor.cpu() if isinstance(tensor, torch.Tensor) else None]
    ops.broadcast_object_list(box, from_process=0)
    if not isinstance(box[0], torch.Tensor):
        raise ValueError("copy_tensor_to_devices needs a tensor on the main process")
    device = tensor.device if isinstance(tensor, torch.Tensor) else _device()
    return box[0].to(device)


def _device() -> torch.device:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
