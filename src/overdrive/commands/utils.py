"""Hugging Face Accelerate's ``accelerate.commands.utils``: an argument parser (and argument
group) whose long options take both spellings, ``--num_processes`` and ``--num-processes``,
and that records in ``args.nondefault`` which options the command line gave."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TypeVar

_Action = TypeVar("_Action", bound=argparse.Action)


def _both_spellings(option_strings: Sequence[str]) -> list[str]:
    """``option_strings`` with the dashed twin of each ``--snake_case`` option added."""
    out = list(option_strings)
    for option in option_strings:
        twin = "--" + option[2:].replace("_", "-")
        if option.startswith("--") and twin != option and twin not in out:
            out.append(twin)
    return out


class _Noted:
    """Mixin for store actions: the destination joins ``namespace.nondefault`` when given."""

    dest: str

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)  # type: ignore[misc]
        given = getattr(namespace, "nondefault", None)
        if not isinstance(given, set):
            given = set()
            namespace.nondefault = given
        given.add(self.dest)


class _NotedStore(_Noted, argparse._StoreAction):
    pass


class _NotedStoreConst(_Noted, argparse._StoreConstAction):
    pass


class _NotedStoreTrue(_Noted, argparse._StoreTrueAction):
    pass


_NOTED: dict[type, type] = {
    argparse._StoreAction: _NotedStore,
    argparse._StoreConstAction: _NotedStoreConst,
    argparse._StoreTrueAction: _NotedStoreTrue,
}


def _adapted(action: _Action) -> _Action:
    """``action`` taking both spellings and, for a plain store, noting that it was given."""
    action.option_strings = _both_spellings(action.option_strings)
    noted = _NOTED.get(type(action))
    if noted is not None:
        action.__class__ = noted
    return action


class CustomArgumentGroup(argparse._ArgumentGroup):
    """An argument group whose options take both spellings and note when they are given."""

    def _add_action(self, action: _Action) -> _Action:
        return super()._add_action(_adapted(action))


class CustomArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose options take both spellings (``--a_b`` and ``--a-b``) and
    record in ``args.nondefault`` the destinations the command line set."""

    def _add_action(self, action: _Action) -> _Action:
        return super()._add_action(_adapted(action))

    def add_argument_group(self, *args: Any, **kwargs: Any) -> CustomArgumentGroup:
        group = CustomArgumentGroup(self, *args, **kwargs)
        self._action_groups.append(group)
        return group
