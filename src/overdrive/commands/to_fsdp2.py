"""Hugging Face Accelerate's ``to-fsdp2`` command: rewrite a config file's FSDP1 ``fsdp_config``
for FSDP2 (``fsdp_version: 2``), dropping the keys FSDP2 has no use for with a warning each."""

from __future__ import annotations

import argparse
import enum
import logging
from pathlib import Path
from typing import Any

import yaml

from overdrive.cli.command_parser import command_parser
from overdrive.config.rules import RESHARDS

logger = logging.getLogger(__name__)


class ConversionStatus(enum.Enum):
    """What becomes of an FSDP1 key that FSDP2 has no key for."""

    NOT_YET_IMPLEMENTED = 0
    REMOVED = -1


ARGUMENT_KEY_MAPPING: dict[str, str | ConversionStatus] = {
    "fsdp_version": "fsdp_version",
    "fsdp_reshard_after_forward": "fsdp_reshard_after_forward",
    "fsdp_auto_wrap_policy": "fsdp_auto_wrap_policy",
    "fsdp_backward_prefetch": ConversionStatus.REMOVED,
    "fsdp_forward_prefetch": ConversionStatus.NOT_YET_IMPLEMENTED,
    "fsdp_cpu_ram_efficient_loading": "fsdp_cpu_ram_efficient_loading",
    "fsdp_offload_params": "fsdp_offload_params",
    "fsdp_sharding_strategy": "fsdp_reshard_after_forward",
    "fsdp_state_dict_type": "fsdp_state_dict_type",
    "fsdp_sync_module_states": ConversionStatus.REMOVED,
    "fsdp_transformer_layer_cls_to_wrap": "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_min_num_params": "fsdp_min_num_params",
    "fsdp_use_orig_params": ConversionStatus.REMOVED,
    "fsdp_activation_checkpointing": "fsdp_activation_checkpointing",
}
"""Each FSDP1 ``fsdp_config`` key: its FSDP2 key, or why it has none. Keys not listed are
carried over as they are."""

ARGUMENT_VALUE_MAPPING: dict[str, dict[str, bool]] = {
    "fsdp_sharding_strategy": dict(RESHARDS),
    # a config written for FSDP1 may already hold a strategy under the FSDP2 key
    "fsdp_reshard_after_forward": dict(RESHARDS),
}
"""Values that change on the way: a sharding strategy becomes reshard-after-forward."""

_WHY = {
    "fsdp_backward_prefetch": "FSDP2 prefetches the next unit in backward by itself",
    "fsdp_use_orig_params": "FSDP2 always keeps the original parameters (as DTensors)",
    "fsdp_sync_module_states": "FSDP2 fills the shards from the main process's weights by "
    "itself (fsdp_cpu_ram_efficient_loading)",
    "fsdp_forward_prefetch": "forward prefetch is not offered for FSDP2",
}


def convert_config_to_fsdp2(config: dict[str, Any]) -> dict[str, Any]:
    """The config with its ``fsdp_config`` rewritten for FSDP2 (changed in place, returned).

    Keys FSDP2 keeps are carried over (renamed and converted where ``ARGUMENT_KEY_MAPPING``
    / ``ARGUMENT_VALUE_MAPPING`` say so), unknown keys too, dropped ones with a warning
    each; a config already on FSDP2 or without FSDP is returned as it is.
    """
    fsdp = config.get("fsdp_config") or {}
    if not fsdp:
        logger.info("No FSDP config found in the config file, skipping conversion...")
        return config
    if int(fsdp.get("fsdp_version", 1)) == 2:
        logger.warning("Config already specifies FSDP2, skipping conversion...")
        return config
    converted: dict[str, Any] = {}
    for key, value in fsdp.items():
        target = ARGUMENT_KEY_MAPPING.get(key, key)
        if isinstance(target, ConversionStatus):
            what = "removed in" if target is ConversionStatus.REMOVED else "not yet implemented in"
            logger.warning(f"Argument {key} has been {what} FSDP2 ({_WHY[key]}), skipping")
            continue
        converted[target] = ARGUMENT_VALUE_MAPPING.get(key, {}).get(value, value)
    converted["fsdp_version"] = 2
    config["fsdp_config"] = converted
    return config


def to_fsdp2_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``to-fsdp2`` arguments: ``--config_file`` and ``--output_file`` or ``--overwrite``."""
    description = "Convert a config file from FSDP1 to FSDP2"
    parser = command_parser(subparsers, "to-fsdp2", description, to_fsdp2_command)
    parser.add_argument("--config_file", required=True, help="the config file to convert")
    parser.add_argument("--overwrite", action="store_true", help="rewrite --config_file itself")
    parser.add_argument("--output_file", default=None, help="where to write the converted file")
    return parser


def load_config(config_file: str) -> dict[str, Any]:
    """The YAML config file as a dict (an empty file is refused)."""
    with open(config_file, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    if not config:
        raise ValueError(f"Config file {config_file} is empty")
    return dict(config)


def to_fsdp2_command(args: argparse.Namespace) -> None:
    """Convert ``args.config_file`` and write it to ``--output_file`` (or over itself)."""
    if not Path(args.config_file).exists():
        raise FileNotFoundError(f"Config file {args.config_file} not found")
    if not args.overwrite and args.output_file is None:
        raise ValueError("If --overwrite is not set, --output_file must be provided")
    if not args.overwrite and Path(args.output_file).exists():
        raise FileExistsError(
            f"Output file {args.output_file} already exists and --overwrite is not set"
        )
    config = convert_config_to_fsdp2(load_config(args.config_file))
    target = args.config_file if args.overwrite else args.output_file
    with open(target, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle)
