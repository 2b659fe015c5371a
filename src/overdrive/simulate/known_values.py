"""Values a simulated rank can know although its tensors hold none: those computed from
constants alone (``torch.arange``, ``torch.zeros``, a ``torch.tensor`` literal, a real tensor
made before the simulation) through deterministic operators. Each such fake tensor is
shadowed by a small real copy of its value, computed on this CPU, so that code reading it
(``.item()``, ``bool(tensor)``) takes the branch the real run takes.

Why: libraries decide by values. transformers, for one, looks at the default position ids
(an ``arange``) to tell whether a batch packs several sequences; with a made-up answer it
builds a full attention mask and takes another attention kernel than the real run, and a
pipeline stage held 18% more activation memory simulated than real.

Values that come from data, random numbers or collectives stay unknown, and reads of them
are answered as ``fake_world.made_up_value`` says. A tensor is followed up to
``ELEMENT_LIMIT`` elements; an operator that writes into a known tensor with unknown inputs
forgets every known value (its views may share the storage)."""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

ELEMENT_LIMIT = 1 << 16
"""The largest tensor (in elements) whose value is followed: position ids, masks, lengths."""

aten = torch.ops.aten
_FACTORIES = {
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.zeros.default,
    aten.ones.default,
    aten.full.default,
    aten.scalar_tensor.default,
    aten.eye.default,
    aten.eye.m,
    aten.linspace.default,
    aten.tril_indices.default,
    aten.triu_indices.default,
}
"""Operators whose value depends on their arguments' Python numbers alone."""
_LIKE_FACTORIES = {aten.zeros_like.default, aten.ones_like.default, aten.full_like.default}
"""Operators whose value ignores their tensor argument's values (its shape and dtype count)."""
_UNKNOWABLE = (
    *("rand", "normal", "bernoulli", "uniform", "exponential", "multinomial", "dropout"),
    *("empty", "cauchy", "geometric", "log_normal", "poisson"),
)
"""Name parts of operators whose values are random or left uninitialised."""
_COLLECTIVES = ("c10d", "_c10d_functional")


_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}
"""Per operator: the positions and names of the arguments it writes into."""
_NOT_FOLLOWED: dict[Any, bool] = {}
"""Per operator: whether its result is unknowable whatever its inputs."""


def _writes(func: Any) -> tuple[tuple[int, str], ...]:
    found = _WRITES.get(func)
    if found is None:
        arguments = enumerate(func._schema.arguments)
        found = _WRITES[func] = tuple(
            (index, argument.name)
            for index, argument in arguments
            if argument.alias_info is not None and argument.alias_info.is_write
        )
    return found


def _mutated(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors ``func`` writes into (in-place and ``out=`` arguments)."""
    written = []
    for index, name in _writes(func):
        value = args[index] if index < len(args) else kwargs.get(name)
        leaves, _ = tree_flatten(value)
        written += [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    return written


def _unknowable(func: Any) -> bool:
    found = _NOT_FOLLOWED.get(func)
    if found is None:
        name = func._schema.name
        found = func.namespace in _COLLECTIVES or any(part in name for part in _UNKNOWABLE)
        _NOT_FOLLOWED[func] = found
    return found


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among an operator's arguments (in lists and tuples one level down)."""
    found = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found += [item for item in value if isinstance(item, torch.Tensor)]
    return found


def _on_cpu(value: Any) -> Any:
    return torch.device("cpu") if isinstance(value, torch.device) else value


class KnownValues:
    """The real value of each fake tensor computed from constants alone (weakly held: kept
    by the fake tensor's id, with a reference that drops the entry when the tensor goes,
    since a lookup runs for every operator of a simulated step)."""

    def __init__(self) -> None:
        self.values: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}

    def value_of(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor``'s real value where it is known: a small real tensor is its own."""
        if isinstance(tensor, FakeTensor):
            entry = self.values.get(id(tensor))
            if entry is None or entry[0]() is not tensor:
                return None
            return entry[1]
        return tensor if tensor.numel() <= ELEMENT_LIMIT else None

    def follow(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """After ``func`` ran on fake tensors with result ``out``: compute its real result
        where every input's value is known, and keep it as the outputs' values."""
        if func in _FACTORIES:
            self._compute(func, args, kwargs, out, like=None)
            return
        if func in _LIKE_FACTORIES:
            if args[0].numel() <= ELEMENT_LIMIT:
                self._compute(func, args[1:], kwargs, out, like=args[0])
            return
        inputs = _tensors(args, kwargs)
        known = []
        for tensor in inputs:
            value = self.value_of(tensor)
            if value is None:
                break
            known.append(value)
        if not inputs or len(known) < len(inputs) or _unknowable(func):
            written = _mutated(func, args, kwargs) if self.values and _writes(func) else []
            if any(self._shares_known(t) for t in written):
                self.forget()
            return
        real_of = {id(t): k for t, k in zip(inputs, known, strict=True)}
        real_args, real_kwargs = tree_map(
            lambda v: real_of.get(id(v), v) if isinstance(v, torch.Tensor) else v, (args, kwargs)
        )
        if not self._compute(func, real_args, real_kwargs, out, like=None) and _writes(func):
            self.forget()  # an in-place operator may have half run on the real copies

    def read(self, tensor: torch.Tensor) -> bool | int | float | None:
        """What ``tensor.item()`` gives where its value is known; None where it is not."""
        value = self.value_of(tensor)
        if value is None or value.numel() != 1:
            return None
        with _disable_current_modes():
            answer: bool | int | float = value.item()
        return answer

    def forget(self) -> None:
        """Know no value any more."""
        self.values = {}

    def _shares_known(self, tensor: torch.Tensor) -> bool:
        base = tensor._base
        return self.value_of(tensor) is not None or (
            base is not None and self.value_of(base) is not None
        )

    def _keep(self, fake: torch.Tensor, value: torch.Tensor) -> None:
        key, values = id(fake), self.values

        def drop(reference: weakref.ref[torch.Tensor]) -> None:
            entry = values.get(key)
            if entry is not None and entry[0] is reference:
                del values[key]

        values[key] = (weakref.ref(fake, drop), value)

    def _compute(
        self, func: Any, args: Any, kwargs: Any, out: Any, like: torch.Tensor | None
    ) -> bool:
        """Run ``func`` for real on this CPU (a real tensor shaped as ``like`` first among
        the arguments, when given) and keep its outputs as ``out``'s values; False when it
        cannot run."""
        fakes, _ = tree_flatten(out)
        if not any(isinstance(f, FakeTensor) and f.numel() <= ELEMENT_LIMIT for f in fakes):
            return True  # nothing small enough to keep: not run (a model's zeros, say)
        kwargs = {key: _on_cpu(value) for key, value in kwargs.items()}
        try:
            with _disable_current_modes():
                if like is not None:
                    args = (torch.empty(tuple(like.shape), dtype=like.dtype), *args)
                real = func(*args, **kwargs)
        except Exception:  # an operator this CPU cannot run on these values: left unknown
            return False
        reals, _ = tree_flatten(real)
        if len(fakes) != len(reals):
            return True
        for fake, value in zip(fakes, reals, strict=True):
            if (
                isinstance(fake, FakeTensor)
                and isinstance(value, torch.Tensor)
                and value.numel() <= ELEMENT_LIMIT
                and tuple(value.shape) == tuple(fake.shape)
            ):
                self._keep(fake, value)
        return True


@contextlib.contextmanager
def libraries_read_known_values(known: KnownValues) -> Iterator[None]:
    """Inside: transformers, which reads no value of a fake tensor (its ``is_tracing`` takes
    one for a compiler's), reads those ``known`` holds as of real tensors. Installed at the
    first forward of any module, when a script that uses transformers has imported it."""
    original: list[Any] = []

    def install(module: Any, inputs: Any) -> None:
        hook.remove()
        library = sys.modules.get("transformers.utils.import_utils")
        if library is None or not hasattr(library, "is_fake_tensor"):
            return
        is_fake = library.is_fake_tensor
        original.append((library, is_fake))

        def is_fake_tensor(value: Any) -> bool:
            return bool(is_fake(value)) and not (
                isinstance(value, torch.Tensor) and known.value_of(value) is not None
            )

        setattr(library, "is_fake_tensor", is_fake_tensor)  # noqa: B010

    hook = register_module_forward_pre_hook(install)
    try:
        yield
    finally:
        hook.remove()
        for library, is_fake in original:
            setattr(library, "is_fake_tensor", is_fake)  # noqa: B010
