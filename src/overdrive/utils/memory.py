"""Freeing memory and finding a batch size that fits (``accelerate.utils.memory``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from overdrive.bigmodel.tensors import release_cached_memory

_OOM_MESSAGES = (
    "CUDA out of memory.",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "CUDA error: out of memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
    # any device's allocator: "CPU out of memory", "XPU out of memory", "MPS backend out of memory"
    "out of memory",
)


def release_memory(*objects: Any) -> list[None]:
    """Drop references, collect garbage, empty the accelerator's cache; returns one None per
    object.

    Use as ``a, b = release_memory(a, b)`` so the caller's names stop holding them.
    """
    objects = tuple(None for _ in objects)  # this call's own references go before collecting
    release_cached_memory(garbage_collection=True)
    return list(objects)


def should_reduce_batch_size(exception: BaseException) -> bool:
    """True for an out-of-memory error (CUDA or CPU allocator)."""
    oom_type = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    if isinstance(exception, (oom_type, torch.cuda.OutOfMemoryError)):
        return True
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        return any(m in str(exception.args[0]) for m in _OOM_MESSAGES)
    return False


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorator: call ``function(batch_size, *args)``, retrying with a smaller batch size
    (90% of the last one, or ``reduce_batch_size_fn()``) after each out-of-memory error.

    ``function`` takes the batch size as its first argument; callers do not pass it.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    batch_size = starting_batch_size

    def reduce() -> int:
        nonlocal batch_size
        batch_size = reduce_batch_size_fn() if reduce_batch_size_fn else int(batch_size * 0.9)
        return batch_size

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            given = ", ".join(f"{p}={a!r}" for p, a in zip(params[1:], args[1:]))
            raise TypeError(
                f"batch_size is passed by find_executable_batch_size as {function.__name__}'s "
                f"first argument; call {function.__name__}({given}) without it"
            )
        release_memory()
        while True:
            if batch_size == 0:
                raise RuntimeError("no executable batch size found: reached zero")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as exc:
                if not should_reduce_batch_size(exc):
                    raise
                release_memory()
                reduce()

    return decorator


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Return cached accelerator memory to the device (after a ``gc.collect()`` when asked)."""
    release_cached_memory(garbage_collection)
