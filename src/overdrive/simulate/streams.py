"""The stream a simulated rank's code runs on, for the model of CUDA's caching allocator.

On a GPU, FSDP2 allocates its all-gather buffers on its all-gather streams and its
reduce-scatter outputs and sharded gradients on its reduce-scatter stream, and the allocator
keeps each stream's freed blocks for that stream. In a simulated rank FSDP2's device is the
CPU, where ``torch.cpu.stream(s)`` selects nothing; followed here, it says which stream the
code inside it allocates on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from overdrive.simulate.patching import patched

DEFAULT_STREAM = 0


class StreamFollower:
    """Inside: ``torch.cpu.stream(s)`` blocks are followed; :meth:`current` numbers the
    stream the code is on (``DEFAULT_STREAM`` outside any, or on the default stream)."""

    def __init__(self) -> None:
        self._stack: list[int] = []
        self._numbers: dict[int, int] = {}
        self._kept: list[Any] = []  # the streams numbered, kept alive so that ids stay unique
        self._patch: contextlib.AbstractContextManager[None] | None = None

    def current(self) -> int:
        return self._stack[-1] if self._stack else DEFAULT_STREAM

    def _number(self, stream: Any) -> int:
        if stream is None or stream is torch.cpu.current_stream():
            return DEFAULT_STREAM
        if id(stream) not in self._numbers:
            self._kept.append(stream)
            self._numbers[id(stream)] = len(self._numbers) + 1
        return self._numbers[id(stream)]

    @contextlib.contextmanager
    def _stream(self, stream: Any) -> Iterator[None]:
        self._stack.append(self._number(stream))
        try:
            yield
        finally:
            self._stack.pop()

    def __enter__(self) -> StreamFollower:
        self._patch = patched(torch.cpu, "stream", self._stream)
        self._patch.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._patch is not None:
            self._patch.__exit__(None, None, None)
            self._patch = None
