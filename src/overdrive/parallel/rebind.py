"""Point an optimizer at a model's new parameters after a backend replaced them.

``fully_shard`` (and FSDP1's flattening) swap a module's parameters for sharded ones, so an
optimizer built before ``prepare`` would step tensors the model no longer uses. Parameters
are matched by their name in the module, which the backends keep.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from overdrive.errors import OverdriveError

WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    """A parameter's name as the user's module names it (wrapper prefixes removed)."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def named_params(model: nn.Module) -> dict[str, nn.Parameter]:
    return {clean_name(n): p for n, p in model.named_parameters(remove_duplicate=False)}


def replacement_map(
    before: Mapping[str, nn.Parameter], after: Mapping[str, nn.Parameter]
) -> dict[int, nn.Parameter]:
    """id(old parameter) -> new parameter, for every name whose parameter object changed."""
    return {
        id(old): after[name]
        for name, old in before.items()
        if name in after and after[name] is not old
    }


def rebind(optimizer: torch.optim.Optimizer, mapping: Mapping[int, nn.Parameter]) -> int:
    """Replace old parameters in ``optimizer``'s groups (and state) by new ones; the count."""
    if not mapping:
        return 0
    swapped = 0
    for group in optimizer.param_groups:
        new_params = []
        for p in group["params"]:
            new = mapping.get(id(p))
            if new is not None:
                swapped += 1
                if p in optimizer.state:
                    raise OverdriveError(
                        "the optimizer already holds state (it has stepped) for parameters "
                        "that prepare() just sharded; that state cannot follow them\n"
                        "  fix: prepare the model (and optimizer) before the first "
                        "optimizer.step(), or load optimizer state after prepare() with "
                        "accelerator.load_state()"
                    )
            new_params.append(new if new is not None else p)
        group["params"] = new_params
    return swapped
