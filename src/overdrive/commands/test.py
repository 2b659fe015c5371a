"""Hugging Face Accelerate's ``accelerate.commands.test``: ``test_command`` launches the bundled
sanity check as ``overdrive test`` does (one all-reduce and one training step compared across
ranks) with the given config file."""

from __future__ import annotations

import argparse
import subprocess
from typing import Any

from overdrive.cli import launch_cmd, test_cmd
from overdrive.cli.command_parser import command_parser


def test_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``test`` arguments: ``--config_file``."""
    description = "Check that a launch with your config forms one group and trains in step."
    parser = command_parser(subparsers, "test", description, test_command)
    parser.add_argument("--config_file", "--config-file", dest="config_file", default=None)
    return parser


def test_command(args: argparse.Namespace) -> None:
    """Run the sanity check; a failure raises ``CalledProcessError``."""
    parser = argparse.ArgumentParser()
    launch_cmd.add_launch_options(parser)
    namespace = parser.parse_args([])
    namespace.config_file = getattr(args, "config_file", None)
    code = test_cmd.handle(namespace)
    if code:
        raise subprocess.CalledProcessError(code, ["overdrive", "test"])


def main() -> None:
    """``python -m overdrive.commands.test [--config_file FILE]``."""
    test_command(test_command_parser().parse_args())


if __name__ == "__main__":
    main()
