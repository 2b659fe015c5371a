"""Hugging Face Accelerate's ``accelerate.commands.config`` package: its config-file classes
(``config_args``) and the ``config`` command with its ``default`` and ``update``
subcommands, writing the files ``overdrive launch`` reads."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from overdrive.commands.config.config import config_command_parser
from overdrive.commands.config.config_args import default_config_file, load_config_from_file
from overdrive.commands.config.default import default_command_parser
from overdrive.commands.config.update import update_command_parser

__all__ = [
    "config_command_parser",
    "default_command_parser",
    "default_config_file",
    "get_config_parser",
    "load_config_from_file",
    "main",
    "update_command_parser",
]


def get_config_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``config`` parser with its ``default`` and ``update`` subcommands."""
    parent = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser = config_command_parser(subparsers)
    subcommands = parser.add_subparsers(title="subcommands", dest="subcommand")
    default_command_parser(subcommands, parents=[parent])
    update_command_parser(subcommands, parents=[parent])
    return parser


def main() -> None:
    """Parse this process's command line as ``config [default|update] [options]`` and run
    it; without a subcommand, print the help and exit with status 1."""
    parser = get_config_parser()
    args = parser.parse_args()
    if not hasattr(args, "func"):
        parser.print_help()
        sys.exit(1)
    args.func(args)
