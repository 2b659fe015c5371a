"""How many bytes a model and each of its parts hold, read from shapes and dtypes alone (a
model on the meta device measures the same as a real one)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TypeAlias, cast

import torch
from torch import nn

from overdrive.bigmodel.custom_dtype import CustomDtype
from overdrive.errors import ConfigError

# A part of a model by name: a parameter, a buffer or a submodule.
Entry: TypeAlias = "tuple[str, nn.Module | torch.Tensor]"
_INTEGER_PREFIXES = ("torch.uint", "torch.int", "torch.bool")
# Suffix -> (bytes per unit, whether a lower-case final "b" means bits). Binary units first:
# "GiB" must not be read as "...B".
_UNITS = (
    ("GIB", 2**30, False),
    ("MIB", 2**20, False),
    ("KIB", 2**10, False),
    ("GB", 10**9, True),
    ("MB", 10**6, True),
    ("KB", 10**3, True),
)


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float16"``, ``"torch.float16"`` or ``torch.float16`` as a ``torch.dtype``."""
    if isinstance(dtype, str):
        named: torch.dtype = getattr(torch, dtype.replace("torch.", ""))
        return named
    return dtype


def is_integer_dtype(dtype: torch.dtype) -> bool:
    """Integer and bool tensors keep their dtype when a model is loaded in another one."""
    return str(dtype).startswith(_INTEGER_PREFIXES)


def dtype_byte_size(dtype: object) -> float:
    """Bytes one element of ``dtype`` takes (a bool is an eighth; ``CustomDtype`` values too)."""

    if dtype == torch.bool:
        return 1 / 8
    custom = {CustomDtype.INT2: 1 / 4, CustomDtype.INT4: 1 / 2, CustomDtype.FP8: 1}
    if isinstance(dtype, CustomDtype):
        return custom[dtype]
    if str(dtype).startswith("torch.float8_"):
        return 1
    bits = re.search(r"[^\d](\d+)$", str(dtype))
    if bits is None:
        raise ValueError(f"`dtype` is not a valid dtype: {dtype}.")
    return int(bits.group(1)) // 8


def convert_file_size_to_int(size: int | str) -> int:
    """``"5GB"``, ``"2GiB"``, ``"100MB"`` or ``"512KiB"`` in bytes (an int is returned as is;
    a lower-case final ``b``, as in ``"8Gb"``, counts bits)."""
    problem = (
        f"`size` {size} is not in a valid format. Use an integer for bytes, or a string with a "
        "unit (like '5.0GB')."
    )
    if isinstance(size, int):
        if size < 0:
            raise ValueError(problem)
        return size
    for suffix, scale, bits_when_lower in _UNITS:
        if size.upper().endswith(suffix):
            try:
                value = int(float(size[: -len(suffix)]) * scale)
            except ValueError:
                raise ValueError(problem) from None
            if bits_when_lower and size.endswith("b"):
                value //= 8
            if value < 0:
                raise ValueError(problem)
            return value
    raise ValueError(problem)


def get_non_persistent_buffers(
    module: nn.Module, recurse: bool = False, fqns: bool = False
) -> set[str]:
    """Names of the buffers ``module`` leaves out of its state dict (a new set: the module's
    own bookkeeping is never changed)."""
    found = set(module._non_persistent_buffers_set)
    if recurse:
        for prefix, child in module.named_modules():
            names = child._non_persistent_buffers_set
            found |= {f"{prefix}.{n}" for n in names} if fqns else set(names)
    return found


def named_module_tensors(
    module: nn.Module,
    include_buffers: bool = True,
    recurse: bool = False,
    remove_non_persistent: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """The parameters, then (with ``include_buffers``) the buffers of ``module``, by name."""
    yield from module.named_parameters(recurse=recurse)
    if not include_buffers:
        return
    skip = get_non_persistent_buffers(module, recurse) if remove_non_persistent else set()
    for name, buffer in module.named_buffers(recurse=recurse):
        if name not in skip:
            yield name, buffer


def _tensor_bytes(
    name: str,
    tensor: torch.Tensor,
    dtype: torch.dtype | None,
    special: dict[str, torch.dtype],
) -> float:
    if name in special:
        return tensor.numel() * dtype_byte_size(special[name])
    own = dtype_byte_size(tensor.dtype)
    if dtype is None or is_integer_dtype(tensor.dtype):
        return tensor.numel() * own
    # A load in a given dtype never widens a weight stored narrower.
    return tensor.numel() * min(dtype_byte_size(dtype), own)


def compute_module_sizes(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    buffers_only: bool = False,
) -> dict[str, float]:
    """Bytes under every name prefix of ``model``'s tensors: ``""`` is the whole model, each
    submodule's name its share, each tensor's full name its own size."""
    target = None if dtype is None else as_dtype(dtype)
    special = {k: as_dtype(v) for k, v in (special_dtypes or {}).items()}
    tensors = model.named_buffers() if buffers_only else named_module_tensors(model, recurse=True)
    sizes: dict[str, float] = defaultdict(int)
    for name, tensor in tensors:
        size = _tensor_bytes(name, tensor, target, special)
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            sizes[".".join(parts[:depth])] += size
    return sizes


def compute_module_total_buffer_size(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
) -> float:
    """Bytes of all of ``model``'s buffers."""
    return compute_module_sizes(model, dtype, special_dtypes, buffers_only=True).get("", 0)


def is_leaf_layer(module: object, no_split_module_classes: list[str]) -> bool:
    """A layer placed whole: a tensor, a module without children, or one of the classes the
    caller never splits."""
    if not isinstance(module, nn.Module):
        return True
    return not any(True for _ in module.children()) or (
        type(module).__name__ in no_split_module_classes
    )


def get_max_layer_size(
    modules: Sequence[Entry],
    module_sizes: dict[str, float],
    no_split_module_classes: list[str],
) -> tuple[float, list[str]]:
    """The size of the largest layer (see :func:`is_leaf_layer`) among ``modules`` and the
    names of every layer of that size."""
    largest: float = 0
    names: list[str] = []
    pending = list(modules)
    while pending:
        name, module = pending.pop(0)
        if is_leaf_layer(module, no_split_module_classes):
            size = module_sizes[name]
            if size > largest:
                largest, names = size, [name]
            elif size == largest:
                names.append(name)
        else:
            children = cast(nn.Module, module).named_children()  # not a leaf: a module
            pending = [(f"{name}.{n}", m) for n, m in children] + pending
    return largest, names


def get_module_leaves(module_sizes: dict[str, float]) -> list[str]:
    """The names in ``module_sizes`` that no other name extends (``""`` excluded)."""
    parents = {name.rsplit(".", 1)[0] for name in module_sizes if "." in name}
    return [name for name in module_sizes if name and name not in parents]


def top_level_entries(model: nn.Module) -> list[Entry]:
    """A model's direct parameters, children and buffers: where placing it starts."""
    return [
        *model.named_parameters(recurse=False),
        *model.named_children(),
        *model.named_buffers(recurse=False),
    ]


def calculate_maximum_sizes(model: nn.Module) -> tuple[float, tuple[float, list[str]]]:
    """The model's total size and its largest layer (size, names), with the model's own
    ``_no_split_modules`` (transformers sets it) kept whole."""
    sizes = compute_module_sizes(model)
    no_split = list(getattr(model, "_no_split_modules", None) or [])
    return sizes[""], get_max_layer_size(top_level_entries(model), sizes, no_split)


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """(device, storage address, storage bytes): equal for tensors sharing memory. Meta
    tensors have no storage address, so they share one id per size."""
    try:
        storage = tensor.untyped_storage()
        return tensor.device, storage.data_ptr(), storage.nbytes()
    except (NotImplementedError, RuntimeError):
        return tensor.device, 0, tensor.nelement() * tensor.element_size()


def parse_max_memory_value(value: float | str, key: object) -> float:
    """One ``max_memory`` entry in bytes, or a ConfigError naming the entry. A float is bytes
    already (``get_balanced_memory`` keeps 90% of a single GPU's)."""
    if isinstance(value, float) and value >= 0:
        return value
    try:
        return convert_file_size_to_int(value if isinstance(value, str) else int(value))
    except ValueError:
        raise ConfigError(
            f"max_memory[{key!r}] = {value!r} is not a size",
            key="max_memory",
            fix="give bytes as an int or a string with a unit, like '5GB' or '512MiB'",
        ) from None
