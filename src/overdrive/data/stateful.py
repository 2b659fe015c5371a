"""torchdata's ``StatefulDataLoader`` under overdrive's loaders (``use_stateful_dataloader``).

With the switch on, a loader reads through a ``StatefulDataLoader`` and is one (for
``isinstance``): a loader class here becomes a subclass of both (``stateful_variant``),
its own methods first. Its position is the stateful loader's state as of the last batch
handed out (``Pulls`` takes it before each read, as a loader that reads ahead must), so
datasets and iterators with their own ``state_dict`` resume from it instead of being read
again from the start.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterator
from typing import Protocol, cast


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
    return cast(type, StatefulDataLoader)  # torchdata may be installed without types


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
    namespace: dict[str, object] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    namespace["__doc__"] = cls.__doc__
    return type(cls)(cls.__name__, bases, namespace)


class StatefulReader(Protocol):
    """A loader with a position of its own (torchdata's ``StatefulDataLoader``)."""

    def __iter__(self) -> Iterator[object]: ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: dict[str, object], /) -> None: ...


class Pulls:
    """Iterates a ``StatefulDataLoader``, remembering its state after each of the latest
    reads: ``after(n)`` is its state once ``n`` batches were read (rounds are read ahead, so
    the state after a round handed out is an earlier one than the newest)."""

    def __init__(self, loader: StatefulReader, keep: int = 64) -> None:
        self.loader = loader
        self.reads = 0
        self._states: collections.deque[tuple[int, dict[str, object]]] = collections.deque(
            maxlen=keep
        )

    def after(self, reads: int) -> dict[str, object] | None:
        """The state once ``reads`` batches were read (the newest known if not kept)."""
        for n, state in reversed(self._states):
            if n == reads:
                return state
        return self._states[-1][1] if self._states else None

    def __iter__(self) -> Iterator[object]:
        iterator = iter(self.loader)
        while True:
            self._states.append((self.reads, self.loader.state_dict()))
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.reads += 1
            yield batch
