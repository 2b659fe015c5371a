"""The refusals every parallel degree shares: a degree that does not divide the processes,
and a setting that cannot run with that parallelism. Torch-free."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from overdrive.errors import ConfigError

if TYPE_CHECKING:
    from overdrive.config.provenance import Source
    from overdrive.config.settings import Settings

Rule = tuple[str, Callable[[object, "Settings"], bool], str]
"""(setting, whether its value cannot run with the parallelism, the fix)."""


def refuse_not_dividing(
    degree: int, world: int, *, what: str, key: str, source: Source | str
) -> None:
    """Refuse ``degree`` (``what``: e.g. "tensor-parallel") unless it divides ``world``."""
    if world % degree == 0:
        return
    fits = [d for d in range(2, degree) if world % d == 0]
    raise ConfigError(
        f"{what} degree {degree} ({key}, from {source}) does not divide the {world} processes "
        "of this launch",
        key=key,
        fix=f"launch a multiple of {degree} processes (e.g. {degree * -(-world // degree)}), "
        f"or set {key} to a divisor of {world}" + (f" (e.g. {fits[-1]})" if fits else ""),
    )


def refuse_by_rules(
    rules: Sequence[Rule], settings: Settings, *, what: str, asked_by: str, suffix: str = ""
) -> None:
    """Refuse the first setting that ``rules`` say cannot run with ``what`` parallelism
    (``asked_by``: the degree's setting, value and source)."""
    for key, bad, fix in rules:
        value = settings[key]
        if bad(value, settings):
            shown = "not set" if value is None else value
            raise ConfigError(
                f"{key} = {shown} ({settings.source(key)}) cannot run with {what} "
                f"parallelism ({asked_by}){suffix}",
                key=key,
                fix=fix,
            )
