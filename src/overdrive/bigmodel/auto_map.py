"""``infer_auto_device_map``: fill the GPUs in order, then the CPU, then the disk, splitting a
module only where it does not fit and never splitting the classes the caller names; tied
weights land on one device; the first GPU and the CPU keep room for the largest layer, so an
offloaded layer can be brought in to run."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from overdrive.bigmodel.device_map import DeviceMap, clean_device_map
from overdrive.bigmodel.memory import MaxMemory, _as_list, get_max_memory
from overdrive.bigmodel.sizes import (
    Entry,
    compute_module_sizes,
    compute_module_total_buffer_size,
    get_max_layer_size,
    is_leaf_layer,
    top_level_entries,
)
from overdrive.bigmodel.tied_sizes import (
    fallback_allocate,
    get_module_size_with_ties,
    own_parts,
    ties_leaving,
)
from overdrive.bigmodel.ties import find_tied_parameters, warn_if_untied

logger = logging.getLogger("overdrive.bigmodel")


@dataclass
class _Placement:
    """The state of one run of the placement loop."""

    devices: list[int | str]
    memory: dict[int | str, float]  # bytes (get_max_memory's: numbers only)
    main_devices: list[int | str]
    sizes: dict[str, float]
    no_split: list[str]
    pending: list[Entry]
    device_map: DeviceMap = field(default_factory=dict)
    index: int = 0
    used: dict[int | str, float] = field(default_factory=dict)
    buffers: dict[int | str, float] = field(default_factory=dict)
    unfilled: dict[int | str, float] = field(default_factory=dict)
    largest: float = 0
    largest_names: list[str] = field(default_factory=list)

    def measure_largest(self) -> None:
        modules = [(n, m) for n, m in self.pending if isinstance(m, nn.Module)]
        self.largest, self.largest_names = get_max_layer_size(modules, self.sizes, self.no_split)


def _devices_and_main(
    memory: dict[int | str, float],
) -> tuple[list[int | str], list[int | str]]:
    devices = list(memory)
    if "disk" not in devices:
        devices.append("disk")
    gpus = [d for d in devices if d not in ("cpu", "disk")]
    if "mps" in gpus:
        return devices, ["mps"]
    return devices, ([gpus[0], "cpu"] if gpus else ["cpu"])


def infer_auto_device_map(
    model: nn.Module,
    max_memory: MaxMemory | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    verbose: bool = False,
    clean_result: bool = True,
    offload_buffers: bool = False,
    fallback_allocation: bool = False,
) -> DeviceMap:
    """A device map for ``model`` within ``max_memory`` (measured when None): GPUs first, then
    the CPU, then the disk. ``fallback_allocation`` fills a device no module fits whole with
    the first smaller part that does. Works on a model on the meta device."""
    memory = cast("dict[int | str, float]", get_max_memory(max_memory))  # numbers only
    devices, main_devices = _devices_and_main(memory)
    tied = find_tied_parameters(model)
    warn_if_untied(model, tied)
    run = _Placement(
        devices=devices,
        memory=memory,
        main_devices=main_devices,
        sizes=compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes),
        no_split=_as_list(no_split_module_classes),
        pending=top_level_entries(model),
        used={d: 0 for d in devices},
    )
    say: Callable[[str], None] = print if verbose else (lambda *_: None)
    run.largest, run.largest_names = get_max_layer_size(run.pending, run.sizes, run.no_split)
    while run.pending:
        name, module = run.pending.pop(0)
        say(f"\nTreating module {name}.")
        run.largest_names = [
            n for n in run.largest_names if n != name and not n.startswith(name + ".")
        ]
        if not run.largest_names:
            run.measure_largest()
        _place_one(run, name, module, tied, dtype, special_dtypes, offload_buffers,
                   fallback_allocation, say)  # fmt: skip
    device_map = clean_device_map(run.device_map) if clean_result else run.device_map
    _warn_about_offloaded_buffers(run, offload_buffers)
    if run.unfilled:
        lines = "\n".join(f"  - {d}: {m} bytes required" for d, m in run.unfilled.items())
        logger.info(
            "Based on the current allocation process, no modules could be assigned to the "
            f"following devices due to insufficient memory:\n{lines}\nThese minimums hold for "
            "this attempt only; give those devices at least that much, or change the model."
        )
    return device_map


def _place_one(
    run: _Placement,
    name: str,
    module: nn.Module | torch.Tensor,
    tied: list[list[str]],
    dtype: str | torch.dtype | None,
    special_dtypes: dict[str, str | torch.dtype] | None,
    offload_buffers: bool,
    fallback_allocation: bool,
    say: Callable[[str], None],
) -> None:
    size = run.sizes[name]
    outside = ties_leaving(name, tied)
    device = run.devices[run.index]
    limit = None if device == "disk" else run.memory[device]
    reserved: float = 0
    if device in run.main_devices and limit is not None:  # a main device is never the disk
        limit, reserved = limit - run.largest, run.largest
    with_ties, tied_names, tied_modules = get_module_size_with_ties(
        outside, size, run.sizes, run.pending
    )
    if limit is None or run.used[device] + with_ties <= limit:
        say(f"Putting {name} {tied_names or f'(size={size})'} on {device}.")
        run.used[device] += with_ties
        run.device_map[name] = device
        for tied_name in tied_names:
            run.pending = [(n, m) for n, m in run.pending if n != tied_name]
            run.device_map[tied_name] = device
        if not offload_buffers and isinstance(module, nn.Module):
            own = compute_module_total_buffer_size(module, dtype, special_dtypes)
            run.buffers[device] = run.buffers.get(device, 0) + own
        return
    if outside and run.used[device] + size <= limit:
        # The module fits alone: split a tied partner so the tie can come along in parts.
        for tied_name, tied_module in zip(tied_names, tied_modules):
            if is_leaf_layer(tied_module, run.no_split):
                continue
            say(f"Splitting {tied_name}.")
            at = next(i for i, (n, _) in enumerate(run.pending) if n == tied_name)
            parts = own_parts(tied_name, cast(nn.Module, tied_module))  # not a leaf
            run.pending = [(name, module), *run.pending[:at], *parts, *run.pending[at + 1 :]]
            run.measure_largest()
            return
    if run.used[device] + size >= limit and not is_leaf_layer(module, run.no_split):
        say(f"Splitting {name}.")
        run.pending = [*own_parts(name, cast(nn.Module, module)), *run.pending]  # not a leaf
        run.measure_largest()
        return
    if run.used[device] == 0 and fallback_allocation and device != "disk":
        room = run.memory[device] - max(run.largest, with_ties)
        found_name, found, rest = fallback_allocate(
            run.pending, run.sizes, room - run.used[device], run.no_split, tied
        )
        if found_name is not None:
            part = cast("nn.Module | torch.Tensor", found)  # found with its name
            run.pending = [(found_name, part), (name, module), *rest]
            return
    if run.used[device] == 0:
        run.unfilled[device] = with_ties + reserved
    run.used[device] += reserved
    run.index += 1
    run.pending = [(name, module), *run.pending]


def _warn_about_offloaded_buffers(run: _Placement, offload_buffers: bool) -> None:
    offloaded = run.buffers.get("cpu", 0) + run.buffers.get("disk", 0)
    if offloaded <= 0 or offload_buffers:
        return
    gpus = [d for d in run.memory if d not in ("cpu", "disk")]
    fits = any(run.memory[d] >= offloaded + run.used.get(d, 0) for d in gpus)
    if gpus and not fits:
        warnings.warn(
            f"Current model requires {offloaded} bytes of buffer for offloaded layers, which "
            "seems does not fit any GPU's remaining memory. If you are experiencing a OOM "
            "later, please consider using offload_buffers=True.",
            stacklevel=3,
        )
