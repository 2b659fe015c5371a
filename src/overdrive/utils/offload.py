"""``accelerate.utils.offload``: the offload folder (weights kept on disk, read back
memory-mapped). The engine is ``overdrive.bigmodel.store``."""

from __future__ import annotations

from overdrive.bigmodel.store import (
    OffloadedWeightsLoader,
    PrefixedDataset,
    extract_submodules_state_dict,
    load_offloaded_weight,
    offload_state_dict,
    offload_weight,
    save_offload_index,
)

__all__ = [
    "OffloadedWeightsLoader",
    "PrefixedDataset",
    "extract_submodules_state_dict",
    "load_offloaded_weight",
    "offload_state_dict",
    "offload_weight",
    "save_offload_index",
]
