"""Process-control methods of Hugging Face Accelerate's Accelerator (decorators, joins,
forced synchronisation, profiling)."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.nn.parallel import DistributedDataParallel

from overdrive.arguments.kwargs_handlers import ProfileKwargs
from overdrive.config.types import DistributedType


class ProcessControlMixin:
    """``on_process`` and friends, ``join_uneven_inputs``, ``trigger_sync_in_backward``,
    ``profile``."""

    state: Any
    kwargs_handlers: dict[type, Any]
    _dataloaders: list[Any]

    @property
    def is_last_process(self) -> bool:
        return bool(self.state.is_last_process)

    @property
    def multi_device(self) -> bool:
        """True when several processes train together."""
        return bool(self.state.num_processes > 1)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int = 0) -> Any:
        """Decorator: run ``function`` on process ``process_index`` only (others get None)."""
        return self.state.on_process(function, process_index=process_index)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int = 0
    ) -> Any:
        """Decorator: run ``function`` on each machine's ``local_process_index`` only."""
        if function is None:
            return lambda fn: self.on_local_process(fn, local_process_index)
        state = self.state

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if state.local_process_index == local_process_index:
                return function(*args, **kwargs)
            return None

        wrapper.__name__ = getattr(function, "__name__", "wrapper")
        wrapper.__doc__ = function.__doc__
        return wrapper

    def on_last_process(self, function: Callable[..., Any]) -> Any:
        """Decorator: run ``function`` on the last process only."""
        return self.state.on_last_process(function)

    @contextlib.contextmanager
    def join_uneven_inputs(
        self, joinables: Sequence[Any], even_batches: bool | None = None
    ) -> Iterator[None]:
        """Let DDP processes run different numbers of batches inside the block.

        Processes that finish early shadow the others' collectives (torch's ``Join``).
        ``even_batches`` overrides the prepared map-style loaders' setting inside the block.
        Only DDP (several CPU or GPU processes) supports it; elsewhere it warns and does
        nothing.
        """
        if self.state.distributed_type not in (
            DistributedType.MULTI_CPU,
            DistributedType.MULTI_GPU,
        ):
            warnings.warn(
                "join_uneven_inputs is only supported for multi-GPU (and multi-CPU) DDP "
                f"training; with {self.state.distributed_type} it does nothing",
                UserWarning,
                stacklevel=3,
            )
            yield
            return
        from torch.distributed.algorithms import Join

        restore: list[tuple[Any, bool]] = []
        if even_batches is not None:
            iterable = [dl for dl in self._dataloaders if not _map_style(dl)]
            if iterable:
                warnings.warn(
                    "overriding even_batches is only supported for map-style datasets; "
                    f"{len(iterable)} prepared dataloader(s) read iterable datasets and keep "
                    "their setting",
                    UserWarning,
                    stacklevel=3,
                )
            for dl in self._dataloaders:
                if _map_style(dl):
                    restore.append((dl, dl.even_batches))
                    _set_even(dl, even_batches)
        try:
            with Join(list(joinables)):
                yield
        finally:
            for dl, value in restore:
                _set_even(dl, value)

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: Any) -> Iterator[None]:
        """Synchronise gradients in the next backward even inside ``no_sync`` or an
        accumulation window (DDP; a no-op otherwise)."""
        if not isinstance(model, DistributedDataParallel):
            yield
            return
        old_grad, old_param = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = True
        model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            model.require_backward_grad_sync = old_grad
            model.require_forward_param_sync = old_param

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """``torch.profiler`` over the block; yields the profiler. With
        ``output_trace_dir`` each process writes ``profile_<rank>.json`` there."""
        handler = profile_handler or self.kwargs_handlers.get(ProfileKwargs) or ProfileKwargs()
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir:
            os.makedirs(handler.output_trace_dir, exist_ok=True)
            path = os.path.join(
                handler.output_trace_dir, f"profile_{self.state.process_index}.json"
            )
            profiler.export_chrome_trace(path)
        self.state.wait_for_everyone()


def _map_style(dl: Any) -> bool:
    return (
        getattr(dl, "mode", "shard") != "iterable"
        and getattr(dl, "batch_sampler", None) is not None
    )


def _set_even(dl: Any, value: bool) -> None:
    dl.even_batches = value
    sampler = getattr(dl, "batch_sampler", None)
    if sampler is not None and hasattr(sampler, "even"):
        sampler.even = value
