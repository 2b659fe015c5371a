"""Per-rank training memory of a model under DDP, ZeRO/FSDP and tp/pp/dp layouts.

``spec`` describes a model as plain data, ``build`` makes that description from a config file
or ``module:Class`` (torch and transformers imported there only), ``arithmetic`` turns it into
bytes per rank, ``render`` prints them.
"""

from overdrive.memory_estimate.arithmetic import (
    DTYPE_BYTES,
    STRATEGIES,
    Estimate,
    Strategy,
    estimate,
    layout_of,
    normalize_dtype,
)
from overdrive.memory_estimate.spec import ModelSpec, TensorSpec

__all__ = [
    "DTYPE_BYTES",
    "STRATEGIES",
    "Estimate",
    "ModelSpec",
    "Strategy",
    "TensorSpec",
    "estimate",
    "layout_of",
    "normalize_dtype",
]
