"""Module attributes loaded on first use (PEP 562), so importing a module stays cheap.

``__getattr__ = lazy_getattr(__name__, {...})`` in a module makes each listed name load on
first access and stay in the module's globals; any other name raises the usual
AttributeError. Torch-free: it imports nothing until a name is asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

Target = str | Callable[[], Any]
"""Where a lazy name's value comes from: ``"pkg.mod:attr"`` (an attribute of a module),
``"pkg.mod"`` (the module itself) or a function (what it returns)."""


def same_names(defined_in: Mapping[str, str]) -> dict[str, str]:
    """Targets for names each defined under the same name: name -> module, as
    name -> ``"module:name"``."""
    return {name: f"{module}:{name}" for name, module in defined_in.items()}


def load(target: Target) -> Any:
    """The value ``target`` names, imported (or computed) now."""
    if callable(target):
        return target()
    module, _, attribute = target.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


def lazy_getattr(module_name: str, targets: Mapping[str, Target]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module_name`` serving the names in ``targets``."""

    def __getattr__(name: str) -> Any:
        target = targets.get(name)
        if target is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = load(target)
        setattr(sys.modules[module_name], name, value)  # later look-ups skip __getattr__
        return value

    return __getattr__
