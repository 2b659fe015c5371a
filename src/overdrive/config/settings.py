"""Resolved settings: every value with the source that set it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from overdrive.config import schema
from overdrive.config.provenance import Resolved, Source

HANDOVER_VARIABLE = "OVERDRIVE_SETTINGS"
"""The one environment variable through which the launcher hands resolved settings to workers."""


def display_value(value: Any) -> str:
    """A value as `config show` and `launch --dry_run` print it (``-`` for unset)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


class Settings(Mapping[str, Any]):
    """An immutable mapping from canonical key to value, that also knows each value's source."""

    def __init__(self, resolved: Mapping[str, Resolved]) -> None:
        self._resolved = dict(resolved)

    def __getitem__(self, key: str) -> Any:
        return self._resolved[key].value

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved)

    def __len__(self) -> int:
        return len(self._resolved)

    def __repr__(self) -> str:
        explicit = {k: r.value for k, r in self._resolved.items() if r.source.kind != "default"}
        return f"Settings({explicit})"

    def source(self, key: str) -> Source:
        """Where the value of ``key`` came from."""
        return self._resolved[key].source

    def resolved(self, key: str) -> Resolved:
        return self._resolved[key]

    def is_set(self, key: str) -> bool:
        """True when some source other than the defaults gave ``key`` its value."""
        return self._resolved[key].source.kind != "default"

    def section(self, name: str) -> dict[str, Any]:
        """The values of one section (``fsdp_config``...) keyed by their short names."""
        prefix = name + "."
        return {
            k[len(prefix) :]: r.value for k, r in self._resolved.items() if k.startswith(prefix)
        }

    def rows(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) for every setting, in schema order."""
        return [(s.key, self[s.key], str(self.source(s.key))) for s in schema.SETTINGS]

    def to_file_dict(self, *, only_set: bool = True) -> dict[str, Any]:
        """The settings as a nested mapping in config-file shape (YAML/JSON ready)."""
        out: dict[str, Any] = {}
        for key, res in self._resolved.items():
            if only_set and res.source.kind == "default":
                continue
            if "." in key:
                section, name = key.split(".", 1)
                out.setdefault(section, {})[name] = res.value
            else:
                out[key] = res.value
        return out

    def to_json(self) -> str:
        """Serialise values and sources (the launcher's hand-over to workers)."""
        return json.dumps(
            {k: {"value": r.value, "source": r.source.to_json()} for k, r in self._resolved.items()}
        )

    @classmethod
    def from_json(cls, text: str) -> Settings:
        data = json.loads(text)
        return cls(
            {k: Resolved(v["value"], Source.from_json(v["source"])) for k, v in data.items()}
        )
