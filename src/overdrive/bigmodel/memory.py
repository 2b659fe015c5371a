"""How much memory each device offers a model: measured (free GPU memory, available RAM) or
given as ``max_memory``, and balanced over GPUs so each holds a similar share."""

from __future__ import annotations

import logging
from typing import TypeAlias, cast

import torch
from torch import nn

from overdrive.bigmodel.sizes import (
    compute_module_sizes,
    get_module_leaves,
    parse_max_memory_value,
)
from overdrive.bigmodel.ties import resolve
from overdrive.errors import ConfigError

logger = logging.getLogger("overdrive.bigmodel")
NAMED_DEVICES = ("mps", "cpu", "disk")
# Bytes (or a size such as "10GiB") per device: a GPU index, "mps", "cpu", "disk". What
# get_max_memory returns holds numbers only.
MaxMemory: TypeAlias = "dict[int | str, float | str]"


def _measured() -> MaxMemory:
    import psutil

    found: MaxMemory = {}
    integrated = False
    for index in range(torch.cuda.device_count()):
        try:
            torch.zeros(1, device=index)  # free memory is only right once the context exists
            found[index] = torch.cuda.mem_get_info(index)[0]
        except RuntimeError:
            logger.info(f"GPU {index} is not usable; it gets no share of the model.")
            continue
        props = torch.cuda.get_device_properties(index)
        integrated = integrated or bool(getattr(props, "is_integrated", False))
    # MPS and integrated GPUs share the host's RAM: a CPU budget beside them would count it twice.
    if torch.backends.mps.is_available():
        found["mps"] = psutil.virtual_memory().available
    elif not integrated:
        found["cpu"] = psutil.virtual_memory().available
    return found


def get_max_memory(
    max_memory: MaxMemory | None = None,
) -> MaxMemory:
    """Bytes per device: measured when ``max_memory`` is None, else ``max_memory`` with sizes
    as ints, GPUs (by index) first, then ``"mps"``, ``"cpu"``, ``"disk"``.

    A given dict has its string sizes converted in place, as Hugging Face Accelerate does:
    transformers reads the caller's dict back after this call.
    """
    if max_memory is None:
        return _measured()
    for key, value in max_memory.items():
        if isinstance(value, str):
            max_memory[key] = parse_max_memory_value(value, key)
    unknown = [k for k in max_memory if not isinstance(k, int) and k not in NAMED_DEVICES]
    if unknown:
        raise ConfigError(
            f"max_memory names devices {unknown}; devices are GPU indices (ints), 'mps', 'cpu' "
            "and 'disk'",
            key="max_memory",
            fix="key max_memory by 0, 1, ... for GPUs and 'cpu' / 'disk' for the others",
        )
    sizes = {k: parse_max_memory_value(v, k) for k, v in max_memory.items()}
    gpus = sorted(k for k in sizes if isinstance(k, int))
    present = torch.cuda.device_count()
    for index in gpus:
        if not 0 <= index < present:
            logger.warning(
                f"max_memory names GPU {index}, but the GPUs here are {list(range(present))}"
            )
    order: list[int | str] = [*gpus, *(d for d in NAMED_DEVICES if d in sizes)]
    return {k: sizes[k] for k in order}


def _is_accelerator(key: int | str) -> bool:
    return isinstance(key, int) or (isinstance(key, str) and key.startswith(("cuda", "mps")))


def _largest_unsplit_block(
    model: nn.Module, module_sizes: dict[str, float], no_split: list[str]
) -> float:
    first_size: dict[str, float] = {}
    for name, size in module_sizes.items():
        if not name:
            continue
        kind = type(resolve(model, name)).__name__
        if kind in no_split:
            first_size.setdefault(kind, size)
            if len(first_size) == len(set(no_split)):
                break
    return max(first_size.values(), default=0)


def _as_list(classes: str | list[str] | None) -> list[str]:
    if classes is None:
        return []
    return [classes] if isinstance(classes, str) else list(classes)


def get_balanced_memory(
    model: nn.Module,
    max_memory: MaxMemory | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
) -> MaxMemory:
    """A ``max_memory`` that spreads ``model`` evenly over the GPUs: each but the last gets
    its share plus room for one more block (the largest unsplittable block, or 1.25x the mean
    last-level module); ``low_zero`` keeps GPU 0 as empty as the others allow. Without GPUs
    the memory is returned as it is."""
    measured = max_memory is None
    budget = get_max_memory(max_memory)
    memory = cast("dict[int | str, float]", budget)  # numbers only: the same dict
    count = sum(1 for k, v in memory.items() if _is_accelerator(k) and v > 0)
    if count == 0:
        return budget
    if count == 1:
        low_zero = False
        if measured:  # keep a tenth of the one GPU free for activations
            first = next(k for k in memory if isinstance(k, int))
            memory[first] *= 0.9
            logger.info(
                f"Using 90% of GPU {first}'s memory for the model (set max_memory to change)."
            )
    module_sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    share = module_sizes[""] // (count - 1 if low_zero else count)
    block = _largest_unsplit_block(model, module_sizes, _as_list(no_split_module_classes))
    # Means over the last level of modules: drop the tensors first, then take the leaves.
    tensors = set(get_module_leaves(module_sizes))
    modules = {n: v for n, v in module_sizes.items() if n not in tensors}
    leaves = get_module_leaves(modules)
    mean = int(sum(modules[n] for n in leaves) / max(len(leaves), 1))
    share += int(1.25 * max(block, mean))
    gpus = sorted(k for k, v in memory.items() if isinstance(k, int) and v > 0)
    for index in gpus[:-1]:  # the last GPU keeps all it has, in case the margin is short
        cap = memory[0] if low_zero and index == 0 else share
        memory[index] = min(cap, memory[index])
    if low_zero:
        rest = sum(memory[i] for i in range(1, count))
        memory[0] = min(max(0, module_sizes[""] - rest), memory[0])
    return budget
