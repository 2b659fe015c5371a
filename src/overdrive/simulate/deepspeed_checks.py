"""DeepSpeed under simulation: its checks that every rank holds the same integers compare
values a fake process group never delivers. They keep their broadcasts (counted as the real
run's) and skip the comparison."""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any

import torch
import torch.distributed as dist

from overdrive.simulate.patching import patched

CHECKING_MODULES = (
    "deepspeed.runtime.zero.utils",
    "deepspeed.runtime.zero.partition_parameters",
    "deepspeed.runtime.zero.partitioned_param_coordinator",
    "deepspeed.runtime.zero.stage3",
)
"""The modules that hold DeepSpeed's ``assert_ints_same_as_other_ranks`` by name."""


def same_ints_unchecked(ints: list[int]) -> None:
    """``assert_ints_same_as_other_ranks``: rank 0's list length, then its list, broadcast."""
    from deepspeed.accelerator import get_accelerator

    device = torch.device(get_accelerator().device_name(os.environ["LOCAL_RANK"]))
    dist.broadcast(torch.tensor(len(ints), dtype=torch.long, device=device), src=0)
    dist.broadcast(torch.tensor(ints, dtype=torch.long, device=device), src=0)


def patch_deepspeed(stack: contextlib.ExitStack) -> None:
    """Replace the checks in every module that holds them, until ``stack`` closes."""

    for name in CHECKING_MODULES:
        module: Any = importlib.import_module(name)
        if hasattr(module, "assert_ints_same_as_other_ranks"):
            stack.enter_context(
                patched(module, "assert_ints_same_as_other_ranks", same_ints_unchecked)
            )
