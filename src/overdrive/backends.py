"""Which backends this version can run; checked before any process or process group starts.

Free of torch imports, so the launcher can refuse an unavailable backend before it starts
any worker.
"""

from __future__ import annotations

from overdrive.config import Settings
from overdrive.errors import ConfigError

_NOT_BUILT = {
    "XLA": "XLA (TPU)",
    # Other vendors' accelerators the described system names (overdrive runs CPU and CUDA).
    "MULTI_NPU": "Ascend NPUs",
    "MULTI_MLU": "Cambricon MLUs",
    "MULTI_SDAA": "SDAA accelerators",
    "MULTI_MUSA": "Moore Threads MUSA GPUs",
    "MULTI_XPU": "Intel XPUs",
    "MULTI_HPU": "Intel Gaudi HPUs",
    "MULTI_NEURON": "AWS Neuron devices",
}


# megatron_lm_config settings that need what is not built yet: key -> (what, when inert).
_MEGATRON_NOT_BUILT = {
    "megatron_lm_config.recompute_activations": "activation recomputation under MEGATRON_LM",
    "megatron_lm_config.use_distributed_optimizer": "a distributed optimizer under MEGATRON_LM "
    "(FSDP with a tensor-parallel degree shards the optimizer state)",
    "megatron_lm_config.gradient_clipping": "clipping by the backend (call "
    "accelerator.clip_grad_norm_ in the loop: it clips by the global norm over every shard)",
}


def _inert(value: object) -> bool:
    """Unset, off, zero, or a degree of 1; not ``True`` (which equals 1) nor a clipping
    norm of 1.0 (a real request)."""
    if value is None or isinstance(value, bool):
        return value is not True
    return value == 0 or (type(value) is int and value == 1)


def _check_megatron(settings: Settings) -> None:
    """MEGATRON_LM runs tensor parallelism; what it does not run yet is refused by name."""
    for key, what in _MEGATRON_NOT_BUILT.items():
        value = settings[key]
        if not settings.is_set(key) or _inert(value):
            continue
        raise ConfigError(
            f"{key} = {value} ({settings.source(key)}) asks for {what}, which is not available "
            f"yet in this version of overdrive (distributed_type MEGATRON_LM, from "
            f"{settings.source('distributed_type')}, runs tensor and pipeline "
            "parallelism: megatron_lm_config.tp_degree, pp_degree, num_micro_batches)",
            key=key,
            fix=f"remove {key} ({settings.source(key)}); docs/parallelism.md lists what runs",
        )


def check_available(settings: Settings) -> None:
    """Raise if the settings ask for a backend this version cannot run (before any set-up)."""
    requested = settings["distributed_type"]
    if requested == "MEGATRON_LM":
        _check_megatron(settings)
    if requested not in _NOT_BUILT:
        return
    source = settings.source("distributed_type")
    raise ConfigError(
        f"distributed_type {requested} ({_NOT_BUILT[requested]}) is not available yet in "
        f"this version of overdrive; it was set by {source}",
        key="distributed_type",
        fix=f"remove that setting ({source}) to train with DDP (several processes) or on "
        "one device",
    )
