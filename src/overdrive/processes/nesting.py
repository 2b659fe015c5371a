"""Nested lists, tuples and mappings of tensors, with Hugging Face Accelerate's semantics
(the face ``overdrive/utils/operations.py`` re-exports them): ``recursively_apply`` keeps
each container's type and leaves other leaves alone; ``processes/ops.py``'s ``rebuild`` is
the collectives' own, which turns a mapping it cannot rebuild into a ``dict``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from overdrive.processes.ops import is_namedtuple


class CannotPadNestedTensorWarning(UserWarning):
    """``pad_across_processes`` met a nested tensor, which it cannot pad; it was left as is."""


def is_torch_tensor(data: Any) -> bool:
    """True for a ``torch.Tensor``."""
    return isinstance(data, torch.Tensor)


def honor_type(obj: Any, generator: Iterable[Any]) -> Any:
    """The items of ``generator`` in a container of ``obj``'s type (list, tuple, namedtuple)."""
    if is_namedtuple(obj):
        return type(obj)(*list(generator))
    return type(obj)(generator)


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = is_torch_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """``data`` with ``func(leaf, *args, **kwargs)`` in place of every leaf ``test_type`` accepts.

    Lists, tuples (namedtuples too) and mappings keep their types; other leaves stay as they
    are, or raise ``TypeError`` with ``error_on_other_type``.
    """

    def apply(item: Any) -> Any:
        if isinstance(item, (tuple, list)):
            return honor_type(item, (apply(x) for x in item))
        if isinstance(item, Mapping):
            return type(item)({k: apply(v) for k, v in item.items()})  # type: ignore[call-arg]
        if test_type(item):
            return func(item, *args, **kwargs)
        if error_on_other_type:
            raise TypeError(
                f"Unsupported types ({type(item)}) passed to `{func.__name__}`. Only nested "
                f"list/tuple/dicts of objects that are valid for `{test_type.__name__}` should "
                "be passed."
            )
        return item

    return apply(data)


def _as_numbers(tensor: torch.Tensor) -> Any:
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:  # .tolist() has no bfloat16 path
        tensor = tensor.float()
    return tensor.tolist()


def listify(data: Any) -> Any:
    """``data`` with every tensor turned into (nested lists of) Python numbers."""
    return recursively_apply(_as_numbers, data)


def concatenate(data: list[Any] | tuple[Any, ...], dim: int = 0) -> Any:
    """One structure from a list of equal structures: the tensors at each place concatenated
    along ``dim``; a list of one non-tensor is that item."""
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(
            first, (concatenate([d[i] for d in data], dim) for i in range(len(first)))
        )
    if isinstance(first, Mapping):
        return type(first)({k: concatenate([d[k] for d in data], dim) for k in first})  # type: ignore[call-arg]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(data), dim=dim)
    if len(data) == 1:
        return first
    raise TypeError(f"Can only concatenate tensors but got {type(first)}")


def pad_input_tensors(data: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Every tensor in ``data`` padded with zeros along dim 0 from ``batch_size`` rows to the
    next multiple of ``num_processes`` (its first ``batch_size`` rows unchanged)."""

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        target = -(-batch_size // num_processes) * num_processes
        if target == tensor.shape[0]:
            return tensor
        padded = tensor.new_zeros((target, *tensor.shape[1:]))
        index = tuple(
            slice(0, tensor.shape[dim]) if i == dim else slice(None) for i in range(tensor.dim())
        )
        padded[index] = tensor
        return padded

    return recursively_apply(pad, data, error_on_other_type=True)
