"""``AcceleratorState`` and ``GradientState``: Hugging Face Accelerate's state singletons as
views of overdrive's explicit objects.

overdrive has no global state: each ``Accelerator`` owns its ``PartialState`` and its
gradient state. Scripts written for Hugging Face Accelerate call ``AcceleratorState()``
anywhere to read the state; here that returns a view of the most recently created
``Accelerator`` (or, before any, of a ``PartialState`` made from the environment).
``_reset_state()`` forgets that accelerator: like in Hugging Face Accelerate, the forgotten
accelerator then refuses to ``prepare`` anything.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

RESET_MESSAGE = (
    "`AcceleratorState` object has no attribute `distributed_type`. This happens if "
    "`AcceleratorState._reset_state()` was called and an `Accelerator` or `PartialState` "
    "was not reinitialized."
)

_current: weakref.ReferenceType[Any] | None = None
_partial: Any = None  # a PartialState made for views taken before any Accelerator


def set_current(accelerator: Any) -> None:
    """Called by ``Accelerator.__init__``: views now show this accelerator."""
    global _current
    _current = weakref.ref(accelerator)
    AcceleratorState._shared_state = {"accelerator": _current}


def current_accelerator() -> Any:
    """The most recently created live ``Accelerator``, or None."""
    return _current() if _current is not None else None


def current_partial_state() -> Any:
    """The current accelerator's ``PartialState``, else one made from the environment."""
    global _partial
    accelerator = current_accelerator()
    if accelerator is not None:
        return accelerator.state
    if _partial is None:
        from overdrive.state import PartialState

        _partial = PartialState()
    return _partial


def reset_state(reset_partial_state: bool = False) -> None:
    """Forget the current accelerator (it refuses to prepare afterwards)."""
    global _current, _partial
    accelerator = current_accelerator()
    if accelerator is not None:
        accelerator._state_was_reset = True
    _current = None
    AcceleratorState._shared_state = {}
    if reset_partial_state:
        from overdrive.state import PartialState

        _partial = None
        PartialState._shared_state = {}


class AcceleratorState:
    """A view of the current ``Accelerator``'s state (rank, device, precision, backend).

    Attributes are read from the accelerator's ``PartialState`` and settings when read, so
    the view follows the accelerator. Arguments are accepted for signature compatibility;
    settings go to ``Accelerator(...)`` instead.
    """

    _shared_state: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "_state", current_partial_state())
        if not AcceleratorState._shared_state:  # as in Hugging Face Accelerate: now set up
            AcceleratorState._shared_state = {"partial_state": self._state}

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
