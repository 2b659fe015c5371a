"""Where a setting's value came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

SourceKind = Literal["code", "flag", "env", "file", "default"]

# Higher wins. Launch flags sit above the environment: a flag typed on the command line is
# more specific than a variable inherited from the shell.
PRECEDENCE: dict[str, int] = {"default": 0, "file": 1, "env": 2, "flag": 3, "code": 4}


@dataclass(frozen=True)
class Source:
    """One place a value came from, e.g. ``file ./cfg.yaml:7`` or ``env ACCELERATE_USE_CPU``."""

    kind: SourceKind
    detail: str = ""

    def __str__(self) -> str:
        return self.kind if not self.detail else f"{self.kind} {self.detail}"

    @property
    def location(self) -> str:
        """The detail without a rule's note in parentheses (``cfg.yaml:3``)."""
        return self.detail.split(" (", 1)[0]

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Source:
        return cls(kind=data["kind"], detail=data.get("detail", ""))  # type: ignore[arg-type]


DEFAULT = Source("default")


@dataclass(frozen=True)
class Resolved:
    """A setting's final value and the source that set it."""

    value: Any
    source: Source


@dataclass(frozen=True)
class RawValue:
    """A value as one source wrote it, before coercion, with the key as written."""

    key: str
    written_key: str
    raw: Any
    source: Source


class Labelled(dict[str, Any]):
    """Values keyed by setting, each with the words that set it (its source detail).

    Code values come from arguments and plugin fields whose names differ from the setting
    keys: ``use_fsdp`` set by ``Accelerator(fsdp_plugin=...)`` reads as exactly that.
    """

    def __init__(self, values: Mapping[str, Any], labels: Mapping[str, str]) -> None:
        super().__init__(values)
        self.labels = dict(labels)
