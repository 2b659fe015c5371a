"""Entry point of the `overdrive` command: dispatch to subcommands, print user errors cleanly."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from overdrive.errors import OverdriveError


def build_parser() -> argparse.ArgumentParser:
    from overdrive.cli import config_cmd

    parser = argparse.ArgumentParser(
        prog="overdrive",
        description="Run one PyTorch training loop on CPU, GPUs or many machines.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    config_cmd.register(commands)
    for module_name in ("launch_cmd", "env_cmd", "test_cmd"):
        try:
            module = __import__(f"overdrive.cli.{module_name}", fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != f"overdrive.cli.{module_name}":
                raise
            continue
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user errors print one message to stderr and return exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except OverdriveError as exc:
        print(f"overdrive: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("overdrive: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
