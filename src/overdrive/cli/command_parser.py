"""The one way Hugging Face Accelerate's command modules make their parsers: under a parent's
subcommands when given one (the handler then set as ``func``), else standalone."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def command_parser(
    subparsers: Any,
    name: str,
    description: str,
    func: Callable[[argparse.Namespace], Any],
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """``subparsers.add_parser(name)`` with ``func`` as its default handler, or a standalone
    ``overdrive <name>`` parser when ``subparsers`` is None."""
    if subparsers is None:
        return argparse.ArgumentParser(f"overdrive {name}", description=description, **kwargs)
    parser: argparse.ArgumentParser = subparsers.add_parser(name, description=description, **kwargs)
    parser.set_defaults(func=func)
    return parser
