"""`overdrive test`: launch the bundled sanity check with the user's config and launch flags."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from overdrive.cli import launch_cmd

SANITY_MODULE = "overdrive.sanity_check"


def register(commands: Any) -> None:
    """Add the ``test`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "test",
        usage="%(prog)s [--config_file F] [launch options such as --num_processes N]",
        help="check that a launch with your config forms one group and trains in step",
        description="Launch a small sanity check (one all-reduce and one training step, "
        "compared across ranks) exactly as `overdrive launch` would launch your script.",
        allow_abbrev=False,
    )
    launch_cmd.add_launch_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Run the sanity check through the launch path; say whether it passed."""
    args.module = True
    args.command = [SANITY_MODULE]
    args.no_rank_prefix = True  # rank 0 prints the one verdict line; a prefix adds nothing
    code = launch_cmd.handle(args)
    if not args.dry_run and not args.simulate:  # a simulation checks no values
        verdict = "passed" if code == 0 else f"FAILED (exit code {code})"
        sys.stderr.write(f"overdrive test: {verdict}\n")
    return code
