"""Cross-field rules and derived values, applied once after precedence.

Each rule either derives a value (recording the source that implied it) or raises one
ConfigError that names both settings, their sources and the fix.
"""

from __future__ import annotations

from collections.abc import Callable

from overdrive.config.kinds import brief_repr
from overdrive.config.provenance import PRECEDENCE, Resolved, Source
from overdrive.errors import ConfigError

Values = dict[str, Resolved]

BACKEND_SWITCHES = {
    "use_deepspeed": "DEEPSPEED",
    "use_fsdp": "FSDP",
    "use_megatron_lm": "MEGATRON_LM",
}
BACKEND_TYPES = frozenset(BACKEND_SWITCHES.values())


def _explicit(values: Values, key: str) -> bool:
    return values[key].source.kind != "default"


def _outranks(values: Values, first: str, second: str) -> bool:
    """Whether ``first`` came from a source at least as strong as ``second``'s."""
    return PRECEDENCE[values[first].source.kind] >= PRECEDENCE[values[second].source.kind]


def _describe(values: Values, key: str) -> str:
    res = values[key]
    return f"`{key}` = {brief_repr(res.value)} ({res.source})"


def _backends(values: Values) -> None:
    """distributed_type and the use_* switches must name at most one backend."""
    requested: dict[str, str] = {}  # backend -> key that asked for it
    dtype = values["distributed_type"].value
    if dtype in BACKEND_TYPES:
        requested[dtype] = "distributed_type"
    for switch, backend in BACKEND_SWITCHES.items():
        if values[switch].value:
            requested.setdefault(backend, switch)
    if len(requested) > 1:
        first, second = list(requested.values())[:2]
        raise ConfigError(
            f"two backends are enabled at once: {_describe(values, first)} and "
            f"{_describe(values, second)}",
            key=second,
            fix="choose one backend: remove or disable the other setting",
        )
    if requested:
        backend, key = next(iter(requested.items()))
        if dtype != backend:
            values["distributed_type"] = Resolved(backend, values[key].source)
        for switch, name in BACKEND_SWITCHES.items():
            if name == backend and not values[switch].value:
                values[switch] = Resolved(True, values[key].source)


def _machines(values: Values) -> None:
    machines = values["num_machines"].value
    if values["machine_rank"].value >= machines:
        raise ConfigError(
            f"{_describe(values, 'machine_rank')} must be smaller than "
            f"{_describe(values, 'num_machines')}",
            key="machine_rank",
            fix=f"use a machine_rank from 0 to {machines - 1}",
        )
    if machines > 1 and values["main_process_ip"].value is None:
        raise ConfigError(
            f"{_describe(values, 'num_machines')} needs main_process_ip, the address of the "
            "machine with machine_rank 0",
            key="main_process_ip",
            fix="set main_process_ip (config file, ACCELERATE_MAIN_PROCESS_IP or "
            "--main_process_ip)",
        )
    processes = values["num_processes"].value
    if processes is not None and processes % machines != 0:
        raise ConfigError(
            f"{_describe(values, 'num_processes')} cannot be split evenly over "
            f"{_describe(values, 'num_machines')}",
            key="num_processes",
            fix="make num_processes (the total over all machines) a multiple of num_machines",
        )
    gpu_ids = values["gpu_ids"].value
    if processes is not None and gpu_ids != "all":
        per_machine = processes // machines
        available = len(gpu_ids.split(","))
        if per_machine > available:
            raise ConfigError(
                f"{_describe(values, 'num_processes')} needs {per_machine} GPUs per machine but "
                f"{_describe(values, 'gpu_ids')} lists {available}",
                key="num_processes",
                fix="list more gpu_ids or start fewer processes",
            )


def _device(values: Values) -> None:
    dtype = values["distributed_type"].value
    if values["use_cpu"].value and dtype == "MULTI_GPU":
        # A GPU config rehearsed on CPU processes (gloo), the same layout: say so where the
        # backend's source is shown.
        where, cpu = values["distributed_type"].source, values["use_cpu"].source
        note = f"MULTI_GPU rehearsed on CPU processes with gloo: use_cpu from {cpu}"
        values["distributed_type"] = Resolved(
            "MULTI_CPU", Source(where.kind, f"{where.detail} ({note})")
        )
        dtype = "MULTI_CPU"
    processes = values["num_processes"].value
    if (
        dtype == "NO"
        and processes is not None
        and processes > 1
        and _outranks(values, "distributed_type", "num_processes")
    ):
        # A file that says NO and a process count (TRL ships one): Hugging Face Accelerate
        # starts one process; so does overdrive, and the provenance says why.
        count, where = values["num_processes"], values["distributed_type"].source
        note = f"distributed_type NO runs one process; num_processes = {count.value} ({count.source}) cannot take effect"
        values["num_processes"] = Resolved(1, Source(where.kind, f"{where.detail} ({note})"))
        return
    if dtype == "NO" and processes is not None and processes > 1:
        raise ConfigError(
            f"{_describe(values, 'distributed_type')} means one process, but "
            f"{_describe(values, 'num_processes')}",
            key="distributed_type",
            fix="use MULTI_CPU or MULTI_GPU (or leave distributed_type unset) for several processes",
        )


def _deepspeed(values: Values) -> None:
    stage = values["deepspeed_config.zero_stage"].value
    param_device = values["deepspeed_config.offload_param_device"].value
    if param_device != "none" and stage != 3:
        raise ConfigError(
            f"{_describe(values, 'deepspeed_config.offload_param_device')} only works with "
            f"ZeRO stage 3, but {_describe(values, 'deepspeed_config.zero_stage')}",
            key="deepspeed_config.offload_param_device",
            fix="set zero_stage: 3, or offload_param_device: none",
        )
    ds_steps, top_steps = (
        "deepspeed_config.gradient_accumulation_steps",
        "gradient_accumulation_steps",
    )
    if values[ds_steps].value is not None:
        if _explicit(values, top_steps) and values[top_steps].value != values[ds_steps].value:
            raise ConfigError(
                f"gradient accumulation is set twice and disagrees: {_describe(values, top_steps)} "
                f"and {_describe(values, ds_steps)}",
                key=ds_steps,
                fix="set gradient_accumulation_steps in one place only, or make them equal",
            )
        values[top_steps] = values[ds_steps]
    for precision in ("bf16", "fp16"):
        section = values[f"deepspeed_config.{precision}"].value
        if not section or not section.get("enabled", False):
            continue
        mp_key = "mixed_precision"
        if _explicit(values, mp_key) and values[mp_key].value != precision:
            raise ConfigError(
                f"mixed precision is set twice and disagrees: {_describe(values, mp_key)} and "
                f"deepspeed_config.{precision}.enabled = true "
                f"({values[f'deepspeed_config.{precision}'].source})",
                key=mp_key,
                fix=f"set mixed_precision: {precision}, or remove DeepSpeed's {precision} section",
            )
        values[mp_key] = Resolved(precision, values[f"deepspeed_config.{precision}"].source)


def _engine_precision(values: Values) -> None:
    """DeepSpeed runs its own mixed precision (bf16 / fp16 sections), which has no fp8."""
    if values["distributed_type"].value == "DEEPSPEED" and values["mixed_precision"].value == "fp8":
        raise ConfigError(
            f"{_describe(values, 'mixed_precision')} is not supported with "
            f"{_describe(values, 'distributed_type')}: DeepSpeed runs its own mixed precision, "
            "which has no fp8",
            key="mixed_precision",
            fix="use bf16 (or fp16 on a GPU) with DeepSpeed, or fp8 with DDP or FSDP",
        )


RESHARDS = {
    "FULL_SHARD": True,
    "SHARD_GRAD_OP": False,
    "HYBRID_SHARD": True,
    "HYBRID_SHARD_ZERO2": False,
    "NO_SHARD": False,
}
"""FSDP1's sharding strategy as FSDP2's one question: free the gathered weights after forward?
(In Hugging Face Accelerate's order, which ``accelerate to-fsdp2``'s mapping shows.)"""


def _fsdp_strategy_as_reshard(values: Values) -> None:
    """``fsdp_reshard_after_forward: FULL_SHARD`` (Hugging Face Accelerate's wizard, FSDP1)
    names the sharding strategy; the setting itself becomes the boolean that implies."""
    strategy_key = "fsdp_config.fsdp_sharding_strategy"
    reshard_key = "fsdp_config.fsdp_reshard_after_forward"
    named = values[reshard_key].value
    if not isinstance(named, str):
        return
    if _explicit(values, strategy_key) and values[strategy_key].value != named:
        raise ConfigError(
            f"{_describe(values, reshard_key)} and {_describe(values, strategy_key)} name two "
            "sharding strategies",
            key=reshard_key,
            fix="name the sharding strategy in one of them only",
        )
    source = values[reshard_key].source
    values[strategy_key] = Resolved(named, source)
    values[reshard_key] = Resolved(RESHARDS[named], source)


def _fsdp(values: Values) -> None:
    strategy_key = "fsdp_config.fsdp_sharding_strategy"
    reshard_key = "fsdp_config.fsdp_reshard_after_forward"
    _fsdp_strategy_as_reshard(values)
    if values["fsdp_config.fsdp_version"].value != 2:
        return
    implied = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}.get(values[strategy_key].value)
    if not _explicit(values, strategy_key) or implied is None:
        return
    if _explicit(values, reshard_key) and values[reshard_key].value != implied:
        raise ConfigError(
            f"{_describe(values, strategy_key)} and {_describe(values, reshard_key)} disagree "
            "under fsdp_version 2",
            key=reshard_key,
            fix="with fsdp_version 2 set only fsdp_reshard_after_forward "
            "(true = FULL_SHARD, false = SHARD_GRAD_OP)",
        )
    values[reshard_key] = Resolved(implied, values[strategy_key].source)


RULES: tuple[Callable[[Values], None], ...] = (
    _backends,
    _machines,
    _device,
    _deepspeed,
    _engine_precision,
    _fsdp,
)


def apply(values: Values, errors: list[ConfigError] | None = None) -> Values:
    """Run every rule on a copy of ``values``; return the completed values. With ``errors``,
    a rule that fails adds its error there and the other rules still run."""
    out = dict(values)
    for rule in RULES:
        try:
            rule(out)
        except ConfigError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return out
