"""A simulated rank's repeated operators, answered without the fake mode's dispatch.

A fake tensor operator costs about 60 us in ``FakeTensorMode`` even when its own cache
knows the answer: most of it goes to building the cache key from every input's metadata and
to building the output. A transformer's step repeats the same few hundred operators on the
same shapes hundreds of thousands of times. Here the first call of an operator with given
input shapes, strides, storage offsets, dtypes, devices and other arguments goes to the fake
mode, and what it returned is kept as one of:

- new tensors: their shape, stride, dtype and device;
- a view of an input: which input, and the view's shape, stride and storage offset;
- an input itself (an in-place operator, as ``add_``): which.

A later identical call gets the same answer directly (new fake tensors, a new view of the
same input's storage, or the input), in about a third of the time. Anything else always goes
to the fake mode: operators that change an input's shape or storage (``resize_``, ``set_``,
``transpose_``), real tensors, symbolic sizes, fake tensors with a constant value, lists of
outputs. ``OVERDRIVE_SIMULATE_OPERATOR_MEMO=0`` turns it off (to compare reports).

The fake mode never caches functional collectives (about 200 us each); their outputs are
new tensors, so they are answered here too.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from overdrive.simulate.fake_tensor_maker import FakeTensorMaker

_PLAIN: tuple[type, ...] = (int, float, bool, str, type(None), torch.dtype, torch.device)
_PLAIN += (torch.layout, torch.memory_format)
_FAKE = torch._C._TorchDispatchModeKey.FAKE
_NO_MODES = torch._C._DisableTorchDispatch
_CHANGES_METADATA = torch.Tag.inplace_view  # resize_, set_, as_strided_, transpose_, ...

Layout = tuple[tuple[int, ...], tuple[int, ...], Any, torch.dtype, torch.device, bool]
"""A tensor's shape, stride, storage offset, dtype, device and requires_grad."""

NEW, VIEW, SAME = "new", "view", "same"
Answer = tuple[str, int, Layout | None]
"""(NEW, -1, layout), (VIEW, input index, layout) or (SAME, input index, None)."""


def enabled() -> bool:
    """Whether simulated ranks use the memo (the default)."""
    return os.environ.get("OVERDRIVE_SIMULATE_OPERATOR_MEMO", "1") != "0"


class _NotMemoisable(Exception):
    """An argument the memo cannot key on."""


class OperatorMemo:
    """Call an operator through the fake mode below, or answer it from an identical call."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Any, ...], tuple[bool, tuple[Answer, ...]] | None] = {}
        self.answered = 0
        """How many calls were answered from the memo."""
        self._maker = FakeTensorMaker()

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func(*args, **kwargs)``, as the fake mode would answer it."""
        mode = torch._C._get_dispatch_mode(_FAKE)
        if (
            mode is None
            or type(func) is not torch._ops.OpOverload
            or _CHANGES_METADATA in func.tags
        ):
            return func(*args, **kwargs)
        try:
            key = _key(func, args, kwargs, mode)
        except _NotMemoisable:
            return func(*args, **kwargs)
        if key not in self._seen:
            out = func(*args, **kwargs)
            self._seen[key] = _answers(self._maker, out, args, kwargs, mode)
            return out
        known = self._seen[key]
        if known is None:
            return func(*args, **kwargs)
        self.answered += 1
        several, answers = known
        if several:
            return tuple(_answer(self._maker, mode, answer, args) for answer in answers)
        return _answer(self._maker, mode, answers[0], args)


def _key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], mode: Any) -> tuple[Any, ...]:
    # (a default device reaches the operator as its device argument; a default dtype not)
    parts: list[Any] = [func, torch.get_default_dtype(), torch.is_inference_mode_enabled()]
    _add_all(parts, args, mode)
    for name, value in kwargs.items():
        parts.append(name)
        _add(parts, value, mode)
    return tuple(parts)


def _add_all(parts: list[Any], values: Any, mode: Any) -> None:
    parts.append(len(values))
    for value in values:
        _add(parts, value, mode)


def _add(parts: list[Any], value: Any, mode: Any) -> None:
    kind = type(value)
    if kind is FakeTensor:
        if value.fake_mode is not mode or value.constant is not None:
            raise _NotMemoisable
        if value.layout is not torch.strided or value.is_conj() or value.is_neg():
            raise _NotMemoisable
        parts.append(_layout(value))
    elif kind in _PLAIN:
        parts.append(kind)
        parts.append(value)
    elif kind is list or kind is tuple or kind is torch.Size:
        parts.append(kind)
        _add_all(parts, value, mode)
    else:  # real tensors, symbolic sizes, anything else
        raise _NotMemoisable


def _layout(tensor: FakeTensor) -> Layout:
    return (
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.storage_offset(),
        tensor.dtype,
        tensor.fake_device,
        tensor.requires_grad,
    )


def _answers(
    maker: FakeTensorMaker, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any], mode: Any
) -> tuple[bool, tuple[Answer, ...]] | None:
    """Whether ``out`` is a tuple, and how to answer each of its tensors again; None unless
    the memo answers each of them exactly."""
    several = type(out) is tuple
    outputs = out if several else (out,)
    if not outputs or any(type(o) is not FakeTensor for o in outputs):
        return None
    inputs = [a if type(a) is FakeTensor else None for a in args]
    storages = [None if a is None else _storage(a) for a in inputs]
    taken = {_storage(t) for t in _fake_tensors((*args, *kwargs.values()))}
    answers = []
    made: set[int] = set()
    for tensor in outputs:
        storage = _storage(tensor)
        if storage in made or (storage in taken and storage not in storages):
            return None  # two outputs alike, or an output aliasing an out= or listed input
        made.add(storage)
        answer = _how(tensor, inputs, storages)
        if answer is None or not _alike(tensor, _answer(maker, mode, answer, args)):
            return None
        answers.append(answer)
    return several, tuple(answers)


def _fake_tensors(values: Any) -> list[FakeTensor]:
    """The fake tensors among ``values`` and in the lists and tuples among them."""
    found: list[FakeTensor] = []
    for value in values:
        if type(value) is FakeTensor:
            found.append(value)
        elif type(value) in (list, tuple):
            found.extend(_fake_tensors(value))
    return found


def _how(tensor: FakeTensor, inputs: list[Any], storages: list[Any]) -> Answer | None:
    storage = _storage(tensor)
    if storage not in storages:
        return (NEW, -1, _layout(tensor)) if tensor.storage_offset() == 0 else None
    index = storages.index(storage)
    if storages.count(storage) > 1:
        return None
    if tensor is inputs[index]:
        return SAME, index, None
    return VIEW, index, _layout(tensor)


def _storage(tensor: FakeTensor) -> int:
    return int(tensor.untyped_storage()._cdata)


def _alike(tensor: FakeTensor, again: FakeTensor) -> bool:
    return (
        _layout(tensor) == _layout(again)
        and tensor.fake_mode is again.fake_mode
        and tensor.constant is None
        and tensor.layout is torch.strided
        and not tensor.is_conj()
        and not tensor.is_neg()
        and tensor.untyped_storage().nbytes() == again.untyped_storage().nbytes()
        and tensor.is_inference() == again.is_inference()
    )


def _answer(
    maker: FakeTensorMaker, mode: FakeTensorMode, answer: Answer, args: tuple[Any, ...]
) -> FakeTensor:
    kind, index, layout = answer
    if kind == SAME:
        same: FakeTensor = args[index]
        return same
    assert layout is not None
    shape, stride, offset, dtype, device, requires_grad = layout
    with _NO_MODES():  # the meta tensor the fake one wraps, as the fake mode makes it
        tensor = torch.empty_strided(
            shape, stride, dtype=dtype, device="meta", requires_grad=requires_grad
        )
        if kind == VIEW:
            tensor.set_(args[index].untyped_storage(), offset, shape, stride)
    return maker.make(mode, tensor, device)
