"""Hold overdrive against Hugging Face Accelerate's public surface (``dump.py``'s JSON).

Each public name of each Accelerate module must exist at the same dotted path under
``overdrive`` with a call signature that takes every call Accelerate's takes, unless
``on_purpose.py`` lists it with its reason.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any

from tests.surface.dump import parameters

POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


@dataclass
class Report:
    """What the comparison found: names present, missing, or present with an incompatible
    signature (each with the reason), over the names counted."""

    present: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    incompatible: dict[str, str] = field(default_factory=dict)
    on_purpose: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.present) + len(self.missing) + len(self.incompatible) + len(self.on_purpose)


def ours(module: str) -> str:
    """The overdrive module at Accelerate's dotted path ``module``."""
    return "overdrive" + module[len("accelerate") :]


def signature_gap(theirs: list[list[Any]], mine: list[list[Any]]) -> str | None:
    """Why a callable with parameters ``mine`` cannot take every call one with ``theirs``
    takes, or None when it can (``[name, kind, has_default]`` each)."""
    mine_names = {p[0]: p for p in mine}
    my_positional = [p for p in mine if p[1] in POSITIONAL]
    has_var_args = any(p[1] == "VAR_POSITIONAL" for p in mine)
    has_var_kwargs = any(p[1] == "VAR_KEYWORD" for p in mine)
    their_positional = [p for p in theirs if p[1] in POSITIONAL]
    for index, (name, kind, _default) in enumerate(their_positional):
        if index < len(my_positional):
            if my_positional[index][0] != name and kind == "POSITIONAL_OR_KEYWORD":
                return f"positional parameter {index} is {my_positional[index][0]!r}, not {name!r}"
        elif not has_var_args:
            return f"takes no positional parameter {index} ({name!r})"
    for name, kind, _default in theirs:
        if kind == "VAR_POSITIONAL" and not has_var_args:
            return "takes no *args"
        if kind == "VAR_KEYWORD" and not has_var_kwargs:
            return "takes no **kwargs"
        if kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY"):
            mine_p = mine_names.get(name)
            if mine_p is None and not has_var_kwargs:
                return f"takes no keyword {name!r}"
            if mine_p is not None and mine_p[1] == "POSITIONAL_ONLY":
                return f"{name!r} is positional-only"
    theirs_names = {p[0]: p for p in theirs}
    for name, kind, default in mine:
        if default or kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            continue
        their_p = theirs_names.get(name)
        if their_p is None or their_p[2]:
            return f"requires {name!r}, which Accelerate does not"
    return None


def _checks_signature(value: Any) -> bool:
    return not (inspect.isclass(value) and issubclass(value, enum.Enum))


def _lookup(target: Any, name: str, info: dict[str, Any]) -> str | None:
    """Why ``target.name`` does not stand for Accelerate's name, or None when it does."""
    try:
        value = getattr(target, name)
    except AttributeError:
        if info.get("absent_here"):
            return None  # Accelerate defines it only with an optional package missing here
        return f"{target.__name__} has no {name!r}"
    theirs, mine = info["params"], parameters(value)
    if theirs is not None and mine is not None and _checks_signature(value):
        gap = signature_gap(theirs, mine)
        if gap is not None:
            return f"incompatible signature: {gap}"
    return None


def compare(surface: dict[str, Any], on_purpose: dict[str, str]) -> Report:
    """Every module and name of ``surface`` looked up under overdrive."""
    from tests.surface.on_purpose import reason_for

    report = Report()

    def record(dotted: str, gap: str | None, reason: str | None) -> None:
        if gap is None:
            report.present.append(dotted)
        elif reason is not None:
            report.on_purpose[dotted] = reason
        elif gap.startswith("incompatible"):
            report.incompatible[dotted] = gap
        else:
            report.missing[dotted] = gap

    for module, entry in sorted(surface.items()):
        module_reason = reason_for(on_purpose, module, None)
        try:
            target = importlib.import_module(ours(module))
            import_gap = None
        except Exception as exc:  # any failure to import is a gap, reported with its cause
            target = None
            import_gap = f"module {ours(module)} does not import ({type(exc).__name__}: {exc})"
        # The module itself counts: some hold no public names but are imported by path.
        record(module, import_gap, module_reason)
        for name, info in sorted(entry["names"].items()):
            reason = reason_for(on_purpose, module, name) or module_reason
            gap = import_gap if target is None else _lookup(target, name, info)
            record(f"{module}.{name}", gap, reason)
    return report
