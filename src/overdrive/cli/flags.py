"""Argument helpers: every long option accepts both `--snake_case` and `--kebab-case`."""

from __future__ import annotations

import argparse
from typing import Any


def add_flag(parser: argparse.ArgumentParser | Any, name: str, *short: str, **kwargs: Any) -> None:
    """Add ``--name`` and its other spelling (underscores <-> dashes) as one option."""
    snake = name.replace("-", "_")
    kebab = name.replace("_", "-")
    spellings = [f"--{snake}"] + ([f"--{kebab}"] if kebab != snake else [])
    kwargs.setdefault("dest", snake)
    parser.add_argument(*short, *spellings, **kwargs)
