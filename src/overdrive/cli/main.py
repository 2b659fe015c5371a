"""Entry point of the `overdrive` command: dispatch to subcommands, print user errors cleanly."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from overdrive.cli import (
    config_cmd,
    env_cmd,
    estimate_memory_cmd,
    launch_cmd,
    merge_cmd,
    plan_cmd,
    test_cmd,
)
from overdrive.errors import OverdriveError
from overdrive.launch.worker_exit import finish
from overdrive.version import __version__


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand's parser below ``parser`` (``config show`` included)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += [sub, *_subparsers(sub)]
    return found


def build_parser() -> argparse.ArgumentParser:
    """The ``overdrive`` parser with every subcommand registered."""

    parser = argparse.ArgumentParser(
        prog="overdrive",
        description="Run one PyTorch training loop on CPU, GPUs or many machines.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"overdrive {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = (config_cmd, launch_cmd, env_cmd, test_cmd, merge_cmd, estimate_memory_cmd, plan_cmd)
    for module in modules:
        module.register(commands)
    for sub in _subparsers(parser):
        sub.allow_abbrev = False  # --config-fil must not quietly mean --config-file
        sub.set_defaults(cli_parser=sub)  # the deepest subcommand's default wins
    return parser


def _unknown_options(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """``unrecognized arguments: --num_processe (did you mean --num_processes?)``."""
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    words = []
    for item in unknown:
        close = difflib.get_close_matches(item.split("=", 1)[0], known, n=1, cutoff=0.7)
        words.append(f"{item} (did you mean {close[0]}?)" if close else item)
    return "unrecognized arguments: " + " ".join(words)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user errors print one message to stderr and return exit code 2."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        sub = getattr(args, "cli_parser", parser)
        print(f"{sub.prog}: error: {_unknown_options(sub, unknown)}", file=sys.stderr)
        print(f"  fix: see `{sub.prog} --help` for the options", file=sys.stderr)
        return 2
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
    except BrokenPipeError:
        # the reader of the output stopped reading (`overdrive config show | head`): what it
        # read is all it wanted; the rest goes nowhere, without a traceback at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def run() -> NoReturn:
    """``overdrive`` as a program: ``main()``, then the steps of a normal exit (threads
    joined, atexit, files flushed) without tearing down every module it imported: after a
    launch, torch's teardown alone took a third of a second, on every launch."""
    finish(main())


if __name__ == "__main__":
    run()
