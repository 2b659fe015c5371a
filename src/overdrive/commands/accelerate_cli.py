"""Hugging Face Accelerate's ``accelerate`` command (``accelerate.commands.accelerate_cli``):
its subcommands (config, estimate-memory, env, launch, merge-weights, test, to-fsdp2) with
its option names, each run by overdrive. ``overdrive`` (``overdrive.cli.main``) is
overdrive's own command; this one takes the command lines written for Accelerate."""

from __future__ import annotations

import sys

from overdrive.commands.config import get_config_parser
from overdrive.commands.env import env_command_parser
from overdrive.commands.estimate import estimate_command_parser
from overdrive.commands.launch import launch_command_parser
from overdrive.commands.merge import merge_command_parser
from overdrive.commands.test import test_command_parser
from overdrive.commands.to_fsdp2 import to_fsdp2_command_parser
from overdrive.commands.utils import CustomArgumentParser

__all__ = ["main"]


def main() -> None:
    """Parse this process's command line as ``accelerate <command> [<args>]`` and run it;
    without a command, print the help and exit with status 1."""
    parser = CustomArgumentParser(
        "accelerate", usage="accelerate <command> [<args>]", allow_abbrev=False
    )
    subparsers = parser.add_subparsers(help="the commands (each with --help)")
    get_config_parser(subparsers=subparsers)
    for register in (
        estimate_command_parser,
        env_command_parser,
        launch_command_parser,
        merge_command_parser,
        test_command_parser,
        to_fsdp2_command_parser,
    ):
        register(subparsers)
    args = parser.parse_args()
    if not hasattr(args, "func"):
        parser.print_help()
        sys.exit(1)
    args.func(args)


if __name__ == "__main__":
    main()
