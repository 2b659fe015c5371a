"""Hugging Face Accelerate's ``_reset_state()`` as code written for it sees it.

There, every state object shares one dict, which the reset empties: an object made before
the reset then refuses its known attributes (``num_processes``, ``device``, ...) with a
message naming the reset, until a new ``PartialState`` or ``Accelerator`` fills the dict
again. overdrive's state objects each keep their own values; this module marks the ones a
reset reaches and lifts the mark when a new state is made, so the same reads fail and
succeed at the same moments. A state owned by an ``Accelerator`` answers as Hugging Face
Accelerate's ``AcceleratorState`` (its ``accelerator.state``); any other as ``PartialState``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from typing import Any

PARTIAL = "PartialState"
ACCELERATOR = "AcceleratorState"

# Hugging Face Accelerate's ``_known_attrs``: the attributes a reset takes away.
KNOWN = frozenset(
    {
        "_cpu",
        "_mixed_precision",
        "_shared_state",
        "backend",
        "debug",
        "device",
        "distributed_type",
        "fork_launched",
        "local_process_index",
        "num_processes",
        "process_index",
    }
)
KNOWN_ACCELERATOR = KNOWN | {
    "deepspeed_plugin",
    "fsdp_plugin",
    "megatron_lm_plugin",
    "dynamo_plugin",
}

# The properties a reset guards (the others above are absent here or derive from these).
GUARDED = (
    "process_index",
    "local_process_index",
    "num_processes",
    "device",
    "backend",
    "distributed_type",
    "debug",
)

_FACE = "_state_face"
_RESET = "_reset_mark"
_live: weakref.WeakSet[Any] = weakref.WeakSet()


def face(state: Any) -> str:
    """The Hugging Face Accelerate class ``state`` answers as."""
    return str(state.__dict__.get(_FACE, PARTIAL))


def track(state: Any) -> None:
    """Register a new state object (reachable by later resets)."""
    _live.add(state)


def own(state: Any) -> None:
    """Mark ``state`` as an ``Accelerator``'s: it answers as ``AcceleratorState``."""
    state.__dict__[_FACE] = ACCELERATOR


def forget(state: Any) -> None:
    """Mark one state object as reset."""
    state.__dict__[_RESET] = True


def forget_all(faces: Collection[str] = (PARTIAL, ACCELERATOR)) -> None:
    """Mark every live state object answering as one of ``faces`` as reset."""
    for state in list(_live):
        if face(state) in faces:
            forget(state)


def revive(faces: Collection[str] = (PARTIAL, ACCELERATOR)) -> None:
    """A new state was made: objects answering as ``faces`` read their attributes again."""
    for state in list(_live):
        if face(state) in faces:
            state.__dict__.pop(_RESET, None)


def reset_message(name: str, as_class: str) -> str:
    """Hugging Face Accelerate's words for a known attribute read after a reset."""
    return (
        f"`{as_class}` object has no attribute `{name}`. This happens if "
        f"`{as_class}._reset_state()` was called and an `Accelerator` or `PartialState` was "
        "not reinitialized."
    )


def check(state: Any, name: str) -> None:
    """Raise Hugging Face Accelerate's AttributeError if ``state`` was reset."""
    if state.__dict__.get(_RESET):
        raise AttributeError(reset_message(name, face(state)))


def missing(state: Any, name: str) -> AttributeError:
    """The AttributeError for ``name`` absent from ``state``, worded as Hugging Face Accelerate's."""
    as_class = face(state)
    known = KNOWN_ACCELERATOR if as_class == ACCELERATOR else KNOWN
    if name in known and state.__dict__.get(_RESET):
        return AttributeError(reset_message(name, as_class))
    return AttributeError(f"'{as_class}' object has no attribute '{name}'")


# What Hugging Face Accelerate's AcceleratorState holds beyond its PartialState.
ACCELERATOR_ONLY = frozenset(
    {"mixed_precision", "deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin", "dynamo_plugin"}
)


def attribute(state: Any, name: str, current_accelerator: Callable[[], Any]) -> Any:
    """``state.name`` for a name the state object lacks: an Accelerator's state answers what
    Hugging Face Accelerate's ``AcceleratorState`` holds besides (read off that accelerator);
    anything else is ``missing``."""
    if name in ACCELERATOR_ONLY and face(state) == ACCELERATOR:
        check(state, name)
        accelerator = current_accelerator()
        if accelerator is not None and accelerator.state is state:
            return getattr(accelerator, name, None)
    raise missing(state, name)


def guarded(name: str, prop: property) -> property:
    """``prop`` refusing its read after a reset, as the attribute ``name``."""
    getter: Callable[[Any], Any] = prop.fget  # type: ignore[assignment]

    def fget(self: Any) -> Any:
        check(self, name)
        return getter(self)

    return property(fget, prop.fset, prop.fdel, prop.__doc__)


class ResetState:
    """``PartialState._reset_state``: ``PartialState``'s reset (``partial``), except read on an
    ``Accelerator``'s state, where it is ``AcceleratorState``'s (``accelerator``): what
    ``accelerator.state._reset_state()`` calls in Hugging Face Accelerate."""

    def __init__(self, accelerator: Callable[..., None], partial: Callable[..., None]) -> None:
        self.accelerator = accelerator
        self.partial = partial

    def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., None]:
        if obj is not None and face(obj) == ACCELERATOR:
            return self.accelerator
        return self.partial
