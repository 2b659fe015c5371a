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


TYPED_FLAGS = "typed_flags"
"""Namespace attribute: destination -> the option string the user typed for it."""


class TypedStore(argparse.Action):
    """Store a flag's value (``const`` for a switch) and remember the spelling typed.

    Provenance then names the flag the user wrote: ``--multi_gpu`` stays ``--multi_gpu``
    although it sets distributed_type, and ``--use_cpu`` stays ``--use_cpu`` (not ``--cpu``).
    """

    def __init__(
        self, option_strings: list[str], dest: str, const: Any = None, **kwargs: Any
    ) -> None:
        nargs = 0 if const is not None else None
        super().__init__(option_strings, dest, nargs=nargs, const=const, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        typed = dict(getattr(namespace, TYPED_FLAGS, None) or {})
        typed[self.dest] = option_string or ""
        setattr(namespace, TYPED_FLAGS, typed)


def typed_name(args: argparse.Namespace, dest: str, default: str) -> str:
    """The flag typed for ``dest`` in its snake_case spelling (no dashes), else ``default``.

    ``--multi-gpu`` reads ``multi_gpu``: the two spellings of one flag are one name, two
    flags that set one setting (``--multi_gpu``, ``--distributed_type``) are not.
    """
    typed = (getattr(args, TYPED_FLAGS, None) or {}).get(dest)
    return typed.lstrip("-").replace("-", "_") if typed else default


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of 1 or more, else argparse's usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value
