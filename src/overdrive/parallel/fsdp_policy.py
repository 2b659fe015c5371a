"""The FSDP settings a strategy applies, read once from the resolved settings and checked.

Where a setting exists in only one FSDP version, the other version either maps it (said
here, and in ``docs/fsdp.md``) or refuses it when it was set explicitly; nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from overdrive.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from overdrive.config.settings import Settings

_PREFIX = "fsdp_config.fsdp_"


def _key(name: str) -> str:
    return _PREFIX + name


@dataclass(frozen=True)
class FSDPPolicy:
    """What FSDP does to a model; ``source`` maps each setting to where it came from."""

    version: int = 2
    sharding_strategy: str = "FULL_SHARD"
    reshard_after_forward: bool = True
    offload_params: bool = False
    auto_wrap_policy: str | Callable[..., object] | None = None
    layer_names: tuple[str, ...] = ()
    min_num_params: int = 100_000_000
    backward_prefetch: str = "BACKWARD_PRE"
    forward_prefetch: bool = False
    state_dict_type: str = "FULL_STATE_DICT"
    cpu_ram_efficient_loading: bool = False
    sync_module_states: bool = True
    activation_checkpointing: bool = False
    use_orig_params: bool = True
    mixed_precision: str = "no"
    layer_source: str = "default"

    @property
    def sharded_checkpoints(self) -> bool:
        return self.state_dict_type == "SHARDED_STATE_DICT"


def _refuse(settings: Settings, name: str, version: int, fix: str) -> None:
    key = _key(name)
    raise ConfigError(
        f"{key} = {settings[key]} ({settings.source(key)}) cannot take effect with "
        f"fsdp_version {version} ({settings.source(_key('version'))})",
        key=key,
        fix=fix,
    )


def _check_v2(settings: Settings) -> None:
    if settings.is_set(_key("backward_prefetch")) and settings[_key("backward_prefetch")] not in (
        "BACKWARD_PRE",
    ):
        _refuse(
            settings,
            "backward_prefetch",
            2,
            "remove it: fully_shard always prefetches the next unit's parameters in backward "
            "(BACKWARD_PRE); or use fsdp_version 1",
        )
    if settings.is_set(_key("use_orig_params")) and not settings[_key("use_orig_params")]:
        _refuse(
            settings,
            "use_orig_params",
            2,
            "remove it: fully_shard always keeps the original parameters (as DTensors)",
        )


def _v1_strategy(settings: Settings) -> str:
    """FSDP1 has no reshard_after_forward: it maps onto FULL_SHARD / SHARD_GRAD_OP."""
    strategy: str = settings[_key("sharding_strategy")]
    reshard_key = _key("reshard_after_forward")
    if not settings.is_set(reshard_key):
        return strategy
    wanted = "FULL_SHARD" if settings[reshard_key] else "SHARD_GRAD_OP"
    if settings.is_set(_key("sharding_strategy")) and strategy != wanted:
        if strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
            raise ConfigError(
                f"{_key('sharding_strategy')} = {strategy} "
                f"({settings.source(_key('sharding_strategy'))}) and {reshard_key} = "
                f"{settings[reshard_key]} ({settings.source(reshard_key)}) disagree",
                key=reshard_key,
                fix="set only one of them (reshard_after_forward true = FULL_SHARD, "
                "false = SHARD_GRAD_OP)",
            )
        return strategy
    return wanted


def policy_from_settings(
    settings: Settings, plugin_wrap: Callable[..., object] | None = None
) -> FSDPPolicy:
    """The policy for these settings; ``plugin_wrap`` is a callable wrap policy given in code."""
    ignored = _key("ignored_modules")
    if settings[ignored]:
        raise ConfigError(
            f"{ignored} = {settings[ignored]!r} ({settings.source(ignored)}) cannot take effect: "
            "overdrive's FSDP shards every module",
            key=ignored,
            fix=f"remove {ignored} (or leave it empty, as Hugging Face Accelerate's config "
            "files write it)",
        )
    version = settings[_key("version")]
    if version == 2:
        _check_v2(settings)
        strategy = settings[_key("sharding_strategy")]
        reshard = bool(settings[_key("reshard_after_forward")])
        if strategy in ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2"):
            reshard = False
    else:
        strategy = _v1_strategy(settings)
        reshard = strategy in ("FULL_SHARD", "HYBRID_SHARD")
    wrap: str | Callable[..., object] | None = plugin_wrap or settings[_key("auto_wrap_policy")]
    names = settings[_key("transformer_layer_cls_to_wrap")] or []
    if names and wrap is None:
        wrap = "TRANSFORMER_BASED_WRAP"  # naming the layers asks for them to be wrapped
    state_dict_type = settings[_key("state_dict_type")]
    if state_dict_type == "LOCAL_STATE_DICT":
        raise ConfigError(
            f"{_key('state_dict_type')} LOCAL_STATE_DICT "
            f"({settings.source(_key('state_dict_type'))}) saves FSDP1's flat shards, which "
            "only the same world size and wrapping can read back",
            key=_key("state_dict_type"),
            fix="use SHARDED_STATE_DICT (per-rank shards that reshard on load) or FULL_STATE_DICT",
        )
    return FSDPPolicy(
        version=version,
        sharding_strategy=strategy,
        reshard_after_forward=reshard,
        offload_params=bool(settings[_key("offload_params")]),
        auto_wrap_policy=wrap,
        layer_names=tuple(names),
        min_num_params=int(settings[_key("min_num_params")]),
        backward_prefetch=settings[_key("backward_prefetch")],
        forward_prefetch=bool(settings[_key("forward_prefetch")]),
        state_dict_type=state_dict_type,
        cpu_ram_efficient_loading=bool(settings[_key("cpu_ram_efficient_loading")]),
        sync_module_states=bool(settings[_key("sync_module_states")]),
        activation_checkpointing=bool(settings[_key("activation_checkpointing")]),
        use_orig_params=bool(settings[_key("use_orig_params")]),
        mixed_precision=_trained_precision(settings),
        layer_source=str(settings.source(_key("transformer_layer_cls_to_wrap"))),
    )


def _trained_precision(settings: Settings) -> str:
    """The precision FSDP keeps parameters in: fp16 on a CPU is fp32 unless fp16_on_cpu asks
    for it (as the Accelerator's precision policy decides, ``overdrive.precision``)."""
    mode = str(settings["mixed_precision"])
    if mode != "fp16" or settings["fp16_on_cpu"]:
        return mode
    if settings["use_cpu"]:
        return "no"
    import torch  # only this case asks torch (the launcher's preflight stays torch-free)

    return mode if torch.cuda.is_available() else "no"


def param_dtypes(mixed_precision: str) -> tuple[torch.dtype, torch.dtype] | None:
    """(parameter dtype, gradient-reduction dtype) for FSDP's mixed precision, or None.

    fp8 gathers bf16 parameters, as Hugging Face Accelerate's FSDP plugin maps fp8 to bf16
    (its float8 linears cast their bf16 weights themselves). Gradients are reduced in fp32,
    where Hugging Face Accelerate reduces in the parameters' dtype (docs/fsdp.md)."""
    import torch

    if mixed_precision in ("bf16", "fp8"):
        return torch.bfloat16, torch.float32
    if mixed_precision == "fp16":
        return torch.float16, torch.float32
    return None
