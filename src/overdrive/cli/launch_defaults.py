"""The values Hugging Face Accelerate's ``launch`` parser gives options that were not typed
(``args.fsdp_sync_module_states`` is ``"true"``, ``args.rdzv_backend`` is ``"static"``), so a
namespace parsed here reads as one parsed there. Such a value is no flag: the environment
and the config file still decide the setting, as they do there; a value typed, or set on the
namespace afterwards, is one.
"""

from __future__ import annotations

import argparse
from typing import Any

# Option -> Hugging Face Accelerate's parse default, for the options whose default there is
# not None (the others read None in both).
PARSE_DEFAULTS: dict[str, Any] = {
    "dynamo_mode": "default",
    "dynamo_use_dynamic": False,
    "dynamo_use_fullgraph": False,
    "dynamo_use_regional_compilation": False,
    "fsdp_activation_checkpointing": "false",
    "fsdp_cpu_ram_efficient_loading": "true",
    "fsdp_forward_prefetch": "false",
    "fsdp_min_num_params": 100000000,
    "fsdp_offload_params": "false",
    "fsdp_reshard_after_forward": "true",
    "fsdp_sharding_strategy": "FULL_SHARD",
    "fsdp_sync_module_states": "true",
    "fsdp_use_orig_params": "true",
    "fsdp_version": "1",
    "megatron_lm_gradient_clipping": 1.0,
    "megatron_lm_pp_degree": 1,
    "megatron_lm_tp_degree": 1,
    "parallelism_config_cp_backend": "torch",
    "parallelism_config_cp_comm_strategy": "allgather",
    "parallelism_config_cp_size": 1,
    "parallelism_config_dp_replicate_size": 1,
    "parallelism_config_dp_shard_size": 1,
    "parallelism_config_tp_size": 1,
    "rdzv_backend": "static",
}

_FILLED = "_parse_defaults"


def fill(args: argparse.Namespace) -> None:
    """Give every option of ``PARSE_DEFAULTS`` left None its default, remembering which."""
    filled = {}
    for name, value in PARSE_DEFAULTS.items():
        if hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, value)
            filled[name] = value
    setattr(args, _FILLED, filled)


def is_parse_default(args: argparse.Namespace, name: str) -> bool:
    """Whether ``args.<name>`` still holds the default :func:`fill` gave it."""
    filled: dict[str, Any] = getattr(args, _FILLED, {})
    return name in filled and getattr(args, name, None) == filled[name]


def with_parse_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser``, filling the defaults after every parse (also as a subcommand's parser)."""
    parse = parser.parse_known_args

    def parse_known_args(
        args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = parse(args, namespace)
        fill(parsed)
        return parsed, rest

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]
    return parser
