"""The base of the backend plugins: dataclass fields mapped to setting keys, and the
refusal of fields set to what overdrive's engine does not do."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from overdrive.errors import ConfigError


class Plugin:
    """Base: maps dataclass fields to canonical setting keys."""

    SECTION: str = ""
    KEYS: dict[str, str] = {}
    SWITCH: str = ""

    def to_settings(self) -> dict[str, Any]:
        """Canonical setting key -> value for every field that was set, plus the backend switch."""
        out: dict[str, Any] = {self.SWITCH: True} if self.SWITCH else {}
        for f in fields(self):  # type: ignore[arg-type]
            key = self.KEYS.get(f.name)
            value = getattr(self, f.name)
            if key is not None and value is not None and not callable(value):
                out[key] = _plain(value)
        return out


def _plain(value: Any) -> Any:
    """A torch enum member (``ShardingStrategy.FULL_SHARD``, ``StateDictType...``) as its
    name, the spelling the settings take; other values as they are."""
    import enum

    return value.name if isinstance(value, enum.Enum) else value


def refuse_fields(plugin: Any, rules: dict[str, tuple[Any, str]]) -> None:
    """Refuse the fields of ``plugin`` set away from what overdrive does, naming each and why.

    ``rules`` maps a field to (the value or tuple of values accepted, why others are not).
    """
    cls = type(plugin).__name__
    for name, (accepted, why) in rules.items():
        value = getattr(plugin, name)
        allowed = accepted if isinstance(accepted, tuple) else (accepted,)
        if not any(value is a or (a is not None and value == a) for a in allowed):
            raise ConfigError(
                f"{cls}({name}={value!r}) is not supported: {why}",
                key=name,
                fix=f"drop {name} (leave it at {allowed[0]!r})",
            )
