"""The floating-point operations of one operator, as PyTorch's FLOP counter counts them
(``torch.utils.flop_counter``: matrix products, attention, convolutions), from the shapes
alone, so fake tensors do. An operator on DTensors is counted on its operands' local shards:
what this rank computes."""

from __future__ import annotations

from typing import Any

from torch.utils._pytree import tree_map
from torch.utils.flop_counter import flop_registry


def _local(value: Any) -> Any:
    return value.to_local() if hasattr(value, "to_local") else value


def operator_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """The FLOPs ``func(*args, **kwargs)`` -> ``out`` takes on this rank (0 for an operator
    the counter does not know: element-wise work is not counted)."""
    counter = flop_registry.get(getattr(func, "_overloadpacket", None))
    if counter is None:
        return 0
    local_args, local_kwargs, local_out = tree_map(_local, (args, kwargs, out))
    return int(counter(*local_args, **local_kwargs, out_val=local_out))


__all__ = ["operator_flops"]
