"""Which backends this version can run; checked before any process or process group starts.

Free of torch imports, so the launcher can refuse an unavailable backend before it starts
any worker.
"""

from __future__ import annotations

from overdrive.config import Settings
from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError

_NOT_BUILT = {
    DistributedType.XLA: "XLA (TPU)",
    # Other vendors' accelerators Hugging Face Accelerate names (overdrive runs CPU and CUDA).
    DistributedType.MULTI_NPU: "Ascend NPUs",
    DistributedType.MULTI_MLU: "Cambricon MLUs",
    DistributedType.MULTI_SDAA: "SDAA accelerators",
    DistributedType.MULTI_MUSA: "Moore Threads MUSA GPUs",
    DistributedType.MULTI_XPU: "Intel XPUs",
    DistributedType.MULTI_HPU: "Intel Gaudi HPUs",
    DistributedType.MULTI_NEURON: "AWS Neuron devices",
}


def check_available(settings: Settings) -> None:
    """Raise if the settings ask for a backend this version cannot run (before any set-up)."""
    requested = requested_backend(settings)
    if requested is None or requested not in _NOT_BUILT:
        return
    source = settings.source("distributed_type")
    raise ConfigError(
        f"distributed_type {requested} ({_NOT_BUILT[requested]}) is not available yet in "
        f"this version of overdrive; it was set by {source}",
        key="distributed_type",
        fix=f"remove that setting ({source}) to train with DDP (several processes) or on "
        "one device",
    )
