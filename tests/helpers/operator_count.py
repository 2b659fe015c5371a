"""A dispatch mode counting the operators dispatched while it is active."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OperatorCount(TorchDispatchMode):
    """``with OperatorCount() as ops: ...``, then ``ops.count``."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))
