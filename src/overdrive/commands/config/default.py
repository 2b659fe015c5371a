"""Hugging Face Accelerate's ``accelerate config default``: write a config file for this
machine with only a few settings chosen (its GPUs, the mixed precision asked for)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from overdrive.cli.basic_config import write_basic_config
from overdrive.cli.config_cmd import _gpu_count, default_answers
from overdrive.commands.config.config_args import ClusterConfig, default_json_config_file

__all__ = ["default_command_parser", "default_config_command", "description", "write_basic_config"]

description = "Create a default config file for overdrive with only a few flags set."


def default_command_parser(parser: Any, parents: list[argparse.ArgumentParser]) -> Any:
    """Add ``default`` to the subcommands ``parser``: ``--config_file`` (saved as
    ``save_location``) and ``--mixed_precision``."""
    command = parser.add_parser("default", parents=parents, help=description)
    command.add_argument(
        "--config_file",
        "--config-file",
        default=default_json_config_file,
        dest="save_location",
        help=f"where to save the config (default: {default_json_config_file})",
    )
    command.add_argument(
        "--mixed_precision",
        "--mixed-precision",
        dest="mixed_precision",
        choices=["no", "fp16", "bf16"],
        default="no",
        help="mixed precision to train in: no, fp16 or bf16",
    )
    command.set_defaults(func=default_config_command)
    return command


def _write_basic_json(mixed_precision: str, save_location: str) -> Path | bool:
    """``write_basic_config``'s settings written as JSON (for a ``.json`` save location)."""
    path = Path(save_location)
    if path.exists():
        return False
    answers = default_answers(_gpu_count(), mixed_precision)
    path.parent.mkdir(parents=True, exist_ok=True)
    ClusterConfig._from_dict(answers, str(path)).to_json_file(str(path))
    return path


def default_config_command(args: argparse.Namespace) -> None:
    """Write the basic config (JSON for a ``.json`` path, else YAML); an existing file is
    kept (and said so)."""
    if str(args.save_location).endswith(".json"):
        written = _write_basic_json(args.mixed_precision, args.save_location)
    else:
        written = write_basic_config(args.mixed_precision, args.save_location)
    if written:
        print(f"overdrive configuration saved at {written}")
    else:
        print(
            f"Configuration already exists at {args.save_location}, will not override. Run "
            "`overdrive config` or pass another --config_file."
        )
