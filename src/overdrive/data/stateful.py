"""torchdata's ``StatefulDataLoader`` under overdrive's loaders (``use_stateful_dataloader``).

With the switch on, a loader reads through a ``StatefulDataLoader`` and is one (for
``isinstance``): a loader class here becomes a subclass of both (``stateful_variant``),
its own methods first. Its position is the stateful loader's state as of the last batch
handed out (``Pulls`` takes it before each read, as a loader that reads ahead must), so
datasets and iterators with their own ``state_dict`` resume from it instead of being read
again from the start.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any


def stateful_loader_class() -> type:
    """torchdata's ``StatefulDataLoader``; an ImportError with the fix when it is missing."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError as exc:
        raise ImportError(
            "use_stateful_dataloader=True needs torchdata's StatefulDataLoader (torchdata >= "
            "0.8), which is not installed\n  fix: pip install torchdata, or leave "
            "use_stateful_dataloader off (prepared loaders resume exactly without it: "
            "state_dict / load_state_dict, save_state / load_state)"
        ) from exc
    return StatefulDataLoader


def is_stateful_class(cls: type) -> bool:
    """Whether ``cls`` already reads through a ``StatefulDataLoader``."""
    try:
        return issubclass(cls, stateful_loader_class())
    except ImportError:
        return False


@functools.cache
def stateful_variant(cls: type, mixin: type | None = None) -> type:
    """``cls`` that is also a ``StatefulDataLoader``: ``mixin``'s methods, then ``cls``'s,
    then the stateful loader's (``super()`` in ``cls`` reaches it before ``DataLoader``)."""
    loader = stateful_loader_class()
    bases = (cls, loader) if mixin is None else (mixin, cls, loader)
    namespace: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    namespace["__doc__"] = cls.__doc__
    return type(cls)(cls.__name__, bases, namespace)


class Pulls:
    """Iterates a ``StatefulDataLoader``; ``before`` is its state before the latest read,
    which is its state after every batch read until then."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.before: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.loader)
        while True:
            self.before = self.loader.state_dict()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch
