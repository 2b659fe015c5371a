"""Hugging Face Accelerate's ``accelerate config update``: read a config file and write it
back with every key in today's form (defaults filled where the file left them out)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from overdrive.commands.config.config_args import default_config_file, load_config_from_file

__all__ = ["description", "update_command_parser", "update_config", "update_config_command"]

description = "Update an existing config file with the latest defaults while keeping its settings."


def update_config(args: argparse.Namespace) -> str:
    """Rewrite ``args.config_file`` (default: the default config file) in place; returns it."""
    config_file = getattr(args, "config_file", None)
    if config_file is None:
        config_file = default_config_file
    if not Path(config_file).exists():
        raise ValueError(f"The passed config file located at {config_file} doesn't exist.")
    config = load_config_from_file(config_file)
    if str(config_file).endswith(".json"):
        config.to_json_file(config_file)
    else:
        config.to_yaml_file(config_file)
    return str(config_file)


def update_command_parser(parser: Any, parents: list[argparse.ArgumentParser]) -> Any:
    """Add ``update`` to the subcommands ``parser``: ``--config_file``."""
    command = parser.add_parser("update", parents=parents, help=description)
    command.add_argument(
        "--config_file",
        "--config-file",
        dest="config_file",
        default=None,
        help=f"the config file to update (default: {default_config_file})",
    )
    command.set_defaults(func=update_config_command)
    return command


def update_config_command(args: argparse.Namespace) -> None:
    """Update and say where."""
    print(f"Successfully updated the configuration file at {update_config(args)}.")
