"""Hugging Face Accelerate's loader classes, for code that builds one directly:
``DataLoaderShard(dataset, batch_size=4)``, ``SkipDataLoader(dataset, skip_batches=2)``,
``DataLoaderAdapter(dataset, batch_size=4)``.

``accelerator.prepare`` returns overdrive's own prepared loader, which also counts as a
``DataLoaderShard`` / ``DataLoaderAdapter`` for ``isinstance``
(code written for Hugging Face Accelerate checks that).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch.utils.data import BatchSampler, DataLoader

from overdrive.data.batches import to_device
from overdrive.data.loader import PreparedDataLoader
from overdrive.data.stateful import StatefulReader, is_stateful_class, stateful_variant
from overdrive.processes.random_state import synchronize_rng_states

if TYPE_CHECKING:
    from typing import Self  # Python 3.11


class DataLoaderStateMixin:
    """``end_of_dataloader`` (True while the last batch is out) and ``remainder``."""

    end_of_dataloader: bool = False
    remainder: int = -1

    def reset(self) -> None:
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        self.reset()

    def end(self) -> None:
        self.end_of_dataloader = True


class _Samplers(Protocol):
    """A loader's samplers (a DataLoader's, or a prepared loader's)."""

    @property
    def sampler(self) -> object: ...

    @property
    def batch_sampler(self) -> object: ...


def get_sampler(dataloader: _Samplers) -> object:
    """The sampler under ``dataloader``'s batches: its batch sampler's ``sampler`` (or, for
    a loader given a ``BatchSampler`` as ``sampler``, that one's)."""
    batches: object = dataloader.sampler if isinstance(dataloader.sampler, BatchSampler) else None
    if batches is None:
        batches = dataloader.batch_sampler
    return getattr(batches, "sampler", None)


def _stateful_loader(
    dataset: object, batch_sampler: object, kwargs: dict[str, object]
) -> DataLoader[object]:
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError as exc:
        raise ImportError(
            "use_stateful_dataloader=True needs torchdata's StatefulDataLoader, which is not "
            "installed\n  fix: pip install 'torchdata>=0.8.0', or use the loaders "
            "accelerator.prepare returns (always resumable: state_dict / load_state_dict)"
        ) from exc
    loader = StatefulDataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
    return cast("DataLoader[object]", loader)  # a DataLoader subclass


class BaseLoader:
    """``base_dataloader`` of a loader that is its own DataLoader: the loader itself unless
    another was set. An instance attribute as in Hugging Face Accelerate (reading it on the
    class raises AttributeError), and not a reference the loader holds to itself: that
    cycle left a loader with worker processes to the garbage collector, which closes the
    worker queues before the workers are told to stop, so each worker took 5 s to be killed."""

    def __get__(self, loader: object, owner: type | None = None) -> Any:
        if loader is None:
            raise AttributeError("base_dataloader is an attribute of a loader, not of its class")
        wrapped = vars(loader).get("_wrapped")
        return loader if wrapped is None else wrapped

    def __set__(self, loader: object, value: object) -> None:
        vars(loader)["_wrapped"] = None if value is loader else value


class _AdaptsLoaders(type):
    """``isinstance(x, DataLoaderAdapter)`` holds for the loaders built here and prepared ones."""

    def __instancecheck__(cls, obj: object) -> bool:
        return type.__instancecheck__(cls, obj) or isinstance(
            obj, (DataLoaderShard, PreparedDataLoader)
        )


class DataLoaderAdapter(metaclass=_AdaptsLoaders):
    """A DataLoader (torchdata's ``StatefulDataLoader`` with ``use_stateful_dataloader``)
    held as ``base_dataloader``, with every attribute read through to it; it reports the
    held loader's class, so ``isinstance(adapter, DataLoader)`` holds."""

    def __init__(
        self,
        dataset: Any,
        use_stateful_dataloader: bool = False,
        batch_sampler: Any = None,
        **kwargs: Any,
    ) -> None:
        self.use_stateful_dataloader = use_stateful_dataloader
        if use_stateful_dataloader:
            self.base_dataloader: DataLoader[object] = _stateful_loader(
                dataset, batch_sampler, kwargs
            )
        else:
            self.base_dataloader = DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        self.dl_state_dict: dict[str, object] = {}
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()

    def __getattr__(self, name: str) -> Any:
        if name == "base_dataloader":  # not set yet: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self.base_dataloader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.base_dataloader:
            self._update_state_dict()
            yield batch

    def __len__(self) -> int:
        return len(self.base_dataloader)

    def state_dict(self) -> dict[str, object]:
        """The held loader's state as of the last batch handed out."""
        return self.dl_state_dict

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        cast(StatefulReader, self.base_dataloader).load_state_dict(state_dict)

    def adjust_state_dict_for_prefetch(self) -> None:
        """Correct ``dl_state_dict`` for batches read ahead; nothing is read ahead here."""

    def _update_state_dict(self) -> None:
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()
            self.adjust_state_dict_for_prefetch()
            self.dl_state_dict["_iterator_finished"] = getattr(self, "end_of_dataloader", False)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_adapter, (type(self), self.__dict__))


def _rebuild_adapter(cls: type, state: dict[str, object]) -> object:
    adapter: object = object.__new__(cls)
    adapter.__dict__.update(state)
    return adapter


class _ReadsStateful:
    """A hand-built loader that reads through torchdata's ``StatefulDataLoader`` (made by
    ``use_stateful_dataloader=True``): its ``state_dict`` is the stateful loader's as of the
    last batch handed out (it reads one batch ahead), marked finished at the last one."""

    dl_state_dict: dict[str, object] | None = None
    end_of_dataloader: bool

    def state_dict(self) -> dict[str, object]:
        if self.dl_state_dict is None:  # not iterated yet: the stateful loader's own
            base = cast(StatefulReader, super())  # the StatefulDataLoader after this mixin
            return dict(base.state_dict())
        return self.dl_state_dict

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        """The next iteration continues where ``state_dict`` was taken."""
        base = cast(StatefulReader, super())
        base.load_state_dict(state_dict)
        self.dl_state_dict = None

    def _snapshot(self) -> None:
        base = cast(StatefulReader, super())
        state = copy.deepcopy(base.state_dict())
        state["_iterator_finished"] = self.end_of_dataloader
        self.dl_state_dict = state


def _wants_stateful(cls: type, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
    """Whether ``cls(*args, **kwargs)`` asks for ``use_stateful_dataloader``."""
    try:
        init: Callable[..., object] = cls.__init__  # type: ignore[misc]
        bound = inspect.signature(init).bind(None, *args, **kwargs)
    except TypeError:
        return False  # __init__ reports the bad call
    return bool(bound.arguments.get("use_stateful_dataloader", False))


class _StatefulOnRequest:
    """Makes ``cls(..., use_stateful_dataloader=True)`` an instance of ``cls``'s stateful
    variant (a base of its own, so ``inspect.signature(cls)`` still shows ``__init__``'s)."""

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        made: type = cls
        if _wants_stateful(made, args, kwargs) and not is_stateful_class(made):
            made = stateful_variant(made, _ReadsStateful)
        return super().__new__(made)


class _CountsPrepared(type):
    """``isinstance(prepared_loader, DataLoaderShard)`` holds for overdrive's prepared loaders."""

    def __instancecheck__(cls, obj: object) -> bool:
        return type.__instancecheck__(cls, obj) or isinstance(obj, PreparedDataLoader)


class DataLoaderShard(
    _StatefulOnRequest, DataLoader[Any], DataLoaderStateMixin, metaclass=_CountsPrepared
):
    """A DataLoader that moves batches to ``device``, skips the first ``skip_batches``,
    knows its last batch (``end_of_dataloader``), copies the ``rng_types`` RNGs from rank 0
    and moves to the next epoch (``iteration``) after each full pass. It shards nothing by
    itself: pass a sharded sampler (``BatchSamplerShard``) or use ``accelerator.prepare``.
    ``torch_device_mesh`` is kept, as Hugging Face Accelerate keeps it (a shard reads its
    own batches whatever the mesh). With ``use_stateful_dataloader`` it reads through
    torchdata's ``StatefulDataLoader`` and is one (``state_dict`` / ``load_state_dict``)."""

    def __init__(
        self,
        dataset: Any,
        device: torch.device | str | None = None,
        rng_types: Sequence[str] | None = None,
        synchronized_generator: torch.Generator | None = None,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        torch_device_mesh: object = None,
        iteration: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self._loader_kwargs = kwargs
        self.device = torch.device(device) if device is not None else None
        self.rng_types = rng_types
        self.synchronized_generator = synchronized_generator
        self.skip_batches = skip_batches
        self.use_stateful_dataloader = bool(use_stateful_dataloader)
        self._drop_last = _drop_last
        self._non_blocking = _non_blocking
        self.torch_device_mesh = torch_device_mesh
        self.iteration = iteration  # the epoch the next pass runs

    base_dataloader = BaseLoader()

    def set_epoch(self, epoch: int) -> None:
        """Tell the batch sampler, the sampler (or the dataset) which epoch starts."""
        self.iteration = epoch
        targets: list[object] = [self.batch_sampler, getattr(self.batch_sampler, "sampler", None)]
        if not any(hasattr(t, "set_epoch") for t in targets):
            targets.append(self.dataset)
        for target in targets:
            if hasattr(target, "set_epoch"):
                target.set_epoch(epoch)

    def get_sampler(self) -> object:
        return get_sampler(self)

    def set_sampler(self, sampler: object) -> None:
        """Put ``sampler`` under this loader's batches."""
        batches: Any = (
            self.sampler if isinstance(self.sampler, BatchSampler) else self.batch_sampler
        )
        batches.sampler = sampler

    def skipping(self, num_batches: int) -> DataLoaderShard:
        """The same loader (same sampler, same epoch) without its first ``num_batches``."""
        twin = copy.copy(self)
        twin.skip_batches = num_batches
        twin.base_dataloader = twin
        return twin

    def _batches(self) -> Iterator[object]:
        """The batches of one pass, before skipping and placement."""
        return super().__iter__()

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.rng_types:
            synchronize_rng_states(self.rng_types, self.synchronized_generator)
        self.begin()
        self.set_epoch(self.iteration)
        batches = self._batches()
        snapshot = getattr(self, "_snapshot", None)  # reading through a StatefulDataLoader
        index, current = 0, next(batches, _NONE)
        while current is not _NONE:
            if snapshot is not None:
                snapshot()  # its state after the batch about to be handed out
            following = next(batches, _NONE)
            if following is _NONE:
                self.end()
                if snapshot is not None:
                    snapshot()
            if index >= self.skip_batches:
                moved = current
                if self.device is not None:
                    moved = to_device(current, self.device, non_blocking=self._non_blocking)
                yield moved
            current, index = following, index + 1
        self.end()
        self.iteration += 1


_NONE = object()


class SkipDataLoader(DataLoaderShard):
    """A DataLoader without its first ``skip_batches`` batches (every epoch)."""

    def __init__(
        self,
        dataset: Any,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            dataset,
            skip_batches=skip_batches,
            use_stateful_dataloader=use_stateful_dataloader,
            **kwargs,
        )

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip_batches)
