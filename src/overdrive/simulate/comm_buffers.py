"""Which tensors the memory report counts as communication buffers.

The rule: a tensor that a ``torch.distributed`` operator (a ``c10d`` one: every collective
and point-to-point call, DDP's, FSDP's, DeepSpeed's and a pipeline schedule's included)
gathers into, reduces, broadcasts, receives into or stages for a reduce-scatter, while no
parameter, gradient, optimizer state or module buffer holds it, counts as communication from
that call until it is freed or one of those claims it. Left out, as values the training has
anyway: a reduce-scatter's output (this rank's share of the reduced gradients), a send's
tensor (the stage's own output or input gradient) and DTensor's functional collectives (new
values the computation goes on with: activations or temporaries).
"""

from __future__ import annotations

from typing import Any

from torch.distributed._tools.mem_tracker import _RefType
from torch.utils._pytree import tree_leaves

from overdrive.simulate.comms import operator_name


class _CommunicationRefType(_RefType):
    COMMUNICATION = "Communication"


COMMUNICATION = _CommunicationRefType.COMMUNICATION
"""The memory report's category for communication buffers."""

BUFFER_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "allreduce_": (0,),
    "allreduce_coalesced_": (0,),
    "reduce_": (0,),
    "broadcast_": (0,),
    "_allgather_base_": (0, 1),
    "allgather_": (0, 1),
    "allgather_coalesced_": (0, 1),
    "allgather_into_tensor_coalesced_": (0, 1),
    "_reduce_scatter_base_": (1,),
    "reduce_scatter_": (1,),
    "reduce_scatter_tensor_coalesced_": (1,),
    "alltoall_": (0, 1),
    "alltoall_base_": (0, 1),
    "gather_": (0, 1),
    "scatter_": (0, 1),
    "recv_": (0,),
    "recv_any_source_": (0,),
}
"""``c10d`` operator name -> the positions of its arguments that are communication buffers
(each one a collective ``comms.KINDS`` counts)."""


def communication_buffers(func: Any, args: tuple[Any, ...]) -> list[Any]:
    """The tensors ``func`` called with ``args`` uses as communication buffers (none for an
    operator outside ``c10d`` or one the rule leaves out)."""
    if getattr(func, "namespace", None) != "c10d":
        return []
    positions = BUFFER_ARGUMENTS.get(operator_name(func) or "", ())
    return [
        leaf
        for position in positions
        if position < len(args)
        for leaf in tree_leaves(args[position])
        if hasattr(leaf, "untyped_storage")
    ]
