"""``accelerate.state``: Hugging Face Accelerate's state names over overdrive's explicit
objects.

overdrive has no global state: each ``Accelerator`` owns its ``PartialState``
(``overdrive.processes.process_state``) and its gradient state. Scripts written for Hugging Face
Accelerate call ``AcceleratorState()`` or ``GradientState()`` anywhere to read the state;
here those are views of the most recently created ``Accelerator`` (or, before any, of a
``PartialState`` made from the environment). ``_reset_state()`` forgets that accelerator:
as in Hugging Face Accelerate, the forgotten accelerator then refuses to ``prepare``.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from overdrive.environment.rank_logging import get_logger
from overdrive.processes import process_state, state_reset
from overdrive.processes.process_state import (
    PartialState,
    current_accelerator,
    current_partial_state,
    reset_state,
)

__all__ = [
    "AcceleratorState",
    "GradientState",
    "PartialState",
    "SharedDict",
    "ThreadLocalSharedDict",
    "do_nothing",
    "is_initialized",
]

logger = get_logger(__name__)


def is_initialized() -> bool:
    """True once an ``Accelerator`` (or an ``AcceleratorState()``) has set up this process's
    state, until ``AcceleratorState._reset_state()``: Hugging Face Accelerate's answer."""
    return process_state.configured != {}


def do_nothing(*args: Any, **kwargs: Any) -> None:
    """Take any arguments and return None (a stand-in callable)."""
    return None


class ThreadLocalSharedDict(threading.local):
    """A descriptor holding one dict per thread: read on the class or an instance, it gives
    that thread's dict; assigned through an instance, it replaces it. Hugging Face Accelerate
    keeps its state in one under TPU threads; overdrive keeps no shared state, and offers it
    for code that builds its own shared objects the same way."""

    def __init__(self, thread_local: bool = False) -> None:
        self._storage: dict[str, Any] = {}

    def __get__(self, obj: Any, objtype: Any = None) -> dict[str, Any]:
        return self._storage

    def __set__(self, obj: Any, value: dict[str, Any]) -> None:
        self._storage = value


SharedDict = dict
"""The container Hugging Face Accelerate shares state in (a plain dict off TPUs)."""


class _Configured(type):
    """``AcceleratorState._shared_state``, read and assigned on the class, is the engine's
    record of whether a state is configured in this process."""

    @property
    def _shared_state(cls) -> dict[str, Any]:
        return process_state.configured

    @_shared_state.setter
    def _shared_state(cls, marker: dict[str, Any]) -> None:
        process_state.set_configured(marker)


class AcceleratorState(metaclass=_Configured):
    """A view of the current ``Accelerator``'s state (rank, device, precision, backend).

    Attributes are read from the accelerator's ``PartialState`` and settings when read, so
    the view follows the accelerator. Arguments are accepted for signature compatibility;
    settings go to ``Accelerator(...)`` instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        state_reset.revive()  # as Hugging Face Accelerate refills its state
        object.__setattr__(self, "_state", current_partial_state())
        if not process_state.configured:  # as in Hugging Face Accelerate: now set up
            process_state.set_configured({"partial_state": self._state})

    _reset_state = staticmethod(reset_state)

    @property
    def mixed_precision(self) -> str:
        accelerator = current_accelerator()
        if accelerator is not None:
            return str(accelerator.mixed_precision)
        return str(self._state.settings["mixed_precision"])

    @property
    def initialized(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_state"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._state, name, value)  # e.g. ``state.debug = True``

    def __repr__(self) -> str:
        return f"AcceleratorState(mixed_precision={self.mixed_precision}, {self._state!r})"


class GradientState:
    """A view of the current ``Accelerator``'s gradient state (accumulation and loader end).

    Without an accelerator it reads as Hugging Face Accelerate's fresh state: gradients sync
    every step, no dataloader is active.
    """

    # Non-empty once a gradient state was asked for (Hugging Face Accelerate's borg marker).
    _shared_state: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        accelerator = current_accelerator()
        object.__setattr__(self, "_target", getattr(accelerator, "gradient_state", None))
        GradientState._shared_state = {"initialized": True}

    @staticmethod
    def _reset_state(*args: Any, **kwargs: Any) -> None:
        GradientState._shared_state = {}

    def __getattr__(self, name: str) -> Any:
        target = object.__getattribute__(self, "_target")
        if target is None:
            defaults = {
                "sync_gradients": True,
                "num_steps": 1,
                "end_of_dataloader": False,
                "remainder": -1,
                "in_dataloader": False,
                "active_dataloader": None,
                "dataloader_references": [None],
            }
            if name in defaults:
                return defaults[name]
            raise AttributeError(name)
        return getattr(target, name)

    def __setattr__(self, name: str, value: Any) -> None:
        target = object.__getattribute__(self, "_target")
        if target is None:
            raise AttributeError(
                f"GradientState().{name} cannot be set before an Accelerator exists; "
                "create the Accelerator first"
            )
        setattr(target, name, value)

    def __repr__(self) -> str:
        return f"GradientState(view of {object.__getattribute__(self, '_target')!r})"
