"""`overdrive config`: the wizard, and `default`, `show`, `validate`."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "config", help="create or inspect a config file"
    )
    parser.set_defaults(handler=lambda args: 0)
