"""Value kinds: how a raw value from any source becomes a canonical setting value.

Each kind's ``coerce`` accepts what a YAML/JSON file, an environment variable (always a
string) or Python code may hold, and either returns the canonical value or raises
``ValueError`` with a short reason. ``describe`` says what is allowed (for error messages
and the wizard); ``samples`` yields a few distinct valid canonical values (for tests and docs).
"""

from __future__ import annotations

import math
import os
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TRUE_WORDS = frozenset({"true", "yes", "1", "on", "y"})
FALSE_WORDS = frozenset({"false", "no", "0", "off", "n"})


class Kind:
    """Base class of a setting's value kind."""

    def coerce(self, raw: Any) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def samples(self) -> list[Any]:
        raise NotImplementedError

    def choices(self) -> tuple[str, ...] | None:
        return None


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 2, 60, 60, 40
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 4
BRIEF_LIMIT = 80


def brief_repr(value: Any) -> str:
    """``repr(value)`` cut to a few dozen characters: a message never echoes a huge value."""
    try:
        text = _BRIEF.repr(value)
    except (ValueError, RecursionError):  # e.g. an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= BRIEF_LIMIT else text[: BRIEF_LIMIT - 3] + "..."


def brief(value: Any) -> str:
    """A value as a message shows it: strings as written, the rest as ``brief_repr``."""
    if not isinstance(value, str):
        return brief_repr(value)
    if len(value) <= BRIEF_LIMIT:
        return value
    return f"{value[: BRIEF_LIMIT - 3]}... ({len(value)} characters)"


@dataclass(frozen=True)
class Bool(Kind):
    def coerce(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        if isinstance(raw, str):
            word = raw.strip().lower()
            if word in TRUE_WORDS:
                return True
            if word in FALSE_WORDS:
                return False
        raise ValueError(f"expected a boolean (true/false, yes/no, 1/0), got {brief(raw)}")

    def describe(self) -> str:
        return "true/false (also yes/no, 1/0)"

    def samples(self) -> list[Any]:
        return [True, False]


@dataclass(frozen=True)
class Int(Kind):
    minimum: int | None = None
    maximum: int | None = None

    def coerce(self, raw: Any) -> int:
        value: int
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {brief(raw)}")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
            value = int(raw)
        elif isinstance(raw, str) and raw.strip().lstrip("+-").isdigit():
            value = int(raw.strip())
        else:
            raise ValueError(f"expected an integer, got {brief(raw)}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be >= {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be <= {self.maximum}, got {value}")
        return value

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"an integer from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"an integer >= {self.minimum}"
        return "an integer"

    def samples(self) -> list[Any]:
        low = self.minimum if self.minimum is not None else 0
        values = [low + 1, low + 2, low + 3]
        if self.maximum is not None:
            values = [v for v in range(low, self.maximum + 1)][-3:]
        return values


@dataclass(frozen=True)
class Float(Kind):
    minimum: float | None = None

    def coerce(self, raw: Any) -> float:
        if isinstance(raw, bool):
            raise ValueError(f"expected a number, got {brief(raw)}")
        try:
            value = float(raw) if isinstance(raw, int | float | str) else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {brief(raw)}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be >= {self.minimum}, got {value}")
        return value

    def describe(self) -> str:
        return "a number" if self.minimum is None else f"a number >= {self.minimum}"

    def samples(self) -> list[Any]:
        return [0.5, 1.0, 2.0]


@dataclass(frozen=True)
class Str(Kind):
    def coerce(self, raw: Any) -> str:
        if isinstance(raw, os.PathLike):  # a pathlib.Path given for a directory or a file
            raw = os.fspath(raw)
        if isinstance(raw, bytes):
            raw = raw.decode()
        if isinstance(raw, str) and raw.strip():
            return raw.strip()
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return str(raw)
        raise ValueError(f"expected a non-empty string, got {brief(raw)}")

    def describe(self) -> str:
        return "a string"

    def samples(self) -> list[Any]:
        return ["alpha", "beta", "gamma"]


@dataclass(frozen=True)
class Choice(Kind):
    """One of a fixed set of words, matched without regard to case.

    ``aliases`` maps other accepted spellings (the documentation uses two for some
    values) to the canonical word; ``false_means`` is the canonical word for a YAML ``no``
    that the YAML loader turned into ``False``.
    """

    allowed: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    false_means: str | None = None
    true_means: str | None = None
    # Also accept 1..N for the N allowed words (FSDP enums, as the config wizard numbers them).
    numbered: bool = False

    def coerce(self, raw: Any) -> str:
        if isinstance(raw, bool):
            mapped = self.false_means if raw is False else self.true_means
            if mapped is not None:
                return mapped
        if self.numbered and isinstance(raw, int | str) and not isinstance(raw, bool):
            text = str(raw).strip()
            if text.isdigit() and 1 <= int(text) <= len(self.allowed):
                return self.allowed[int(text) - 1]
        if isinstance(raw, str):
            folded = raw.strip().lower()
            for word in self.allowed:
                if word.lower() == folded:
                    return word
            for alias, word in self.aliases.items():
                if alias.lower() == folded:
                    return word
        raise ValueError(f"{brief(raw)} is not one of: {', '.join(self.allowed)}")

    def describe(self) -> str:
        return "one of: " + ", ".join(self.allowed)

    def samples(self) -> list[Any]:
        return list(self.allowed[:3])

    def choices(self) -> tuple[str, ...] | None:
        return self.allowed


@dataclass(frozen=True)
class GpuIds(Kind):
    """``all`` or a list of GPU indices; canonical form is ``"all"`` or ``"0,1,3"``."""

    def coerce(self, raw: Any) -> str:
        items: Sequence[Any]
        if isinstance(raw, bool):
            raise ValueError(f"expected 'all' or GPU indices like 0,1,3, got {brief(raw)}")
        if isinstance(raw, int):
            items = [raw]
        elif isinstance(raw, str):
            if raw.strip().lower() == "all":
                return "all"
            items = [part for part in raw.replace(" ", "").strip("[]").split(",") if part]
        elif isinstance(raw, list | tuple):
            items = raw
        else:
            raise ValueError(f"expected 'all' or GPU indices like 0,1,3, got {brief(raw)}")
        indices: list[int] = []
        for item in items:
            text = str(item).strip()
            if isinstance(item, bool) or not text.isdigit():
                raise ValueError(f"expected 'all' or GPU indices like 0,1,3, got {brief(raw)}")
            indices.append(int(text))
        if not indices:
            raise ValueError("expected 'all' or at least one GPU index")
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU indices repeat: {brief(raw)}")
        return ",".join(str(i) for i in indices)

    def describe(self) -> str:
        return "'all' or comma-separated GPU indices such as 0,1,3"

    def samples(self) -> list[Any]:
        return ["all", "0,1", "1"]


@dataclass(frozen=True)
class Words(Kind):
    """A list of words (from a YAML list or a comma-separated string), each from ``allowed``."""

    allowed: tuple[str, ...]

    def coerce(self, raw: Any) -> list[str]:
        if isinstance(raw, str):
            items: list[Any] = [part for part in raw.split(",") if part.strip()]
        elif isinstance(raw, list | tuple):
            items = list(raw)
        else:
            raise ValueError(f"expected a list of names, got {brief(raw)}")
        out: list[str] = []
        for item in items:
            if not isinstance(item, str):
                raise ValueError(f"expected names, got {brief(item)}")
            word = item.strip().lower()
            if word not in self.allowed:
                raise ValueError(f"{brief_repr(item)} is not one of: {', '.join(self.allowed)}")
            if word not in out:
                out.append(word)
        if not out:
            raise ValueError("expected at least one name")
        return out

    def describe(self) -> str:
        return "one or more of: " + ", ".join(self.allowed)

    def samples(self) -> list[Any]:
        return [[w] for w in self.allowed[:3]]

    def choices(self) -> tuple[str, ...] | None:
        return self.allowed


@dataclass(frozen=True)
class TrackerWords(Words):
    """Words from ``allowed``, or a tracker name registered in this process with
    ``overdrive.tracking.register_tracker_class`` (code that registers one has imported it)."""

    def coerce(self, raw: Any) -> list[str]:
        import sys

        registry = sys.modules.get("overdrive.tracking.registry")
        extra = tuple(getattr(registry, "LOGGER_TYPE_TO_CLASS", {}))
        if not extra:
            return super().coerce(raw)
        return Words(self.allowed + tuple(n for n in extra if n not in self.allowed)).coerce(raw)


@dataclass(frozen=True)
class Names(Kind):
    """A list of free-form names (class names), canonical form a list of strings."""

    def coerce(self, raw: Any) -> list[str]:
        if isinstance(raw, str):
            items: list[Any] = [part.strip() for part in raw.split(",") if part.strip()]
        elif isinstance(raw, list | tuple):
            items = list(raw)
        else:
            raise ValueError(f"expected a class name or a list of them, got {brief(raw)}")
        if not items or not all(isinstance(i, str) and i.strip() for i in items):
            raise ValueError(f"expected a class name or a list of them, got {brief(raw)}")
        return [i.strip() for i in items]

    def describe(self) -> str:
        return "a class name or a comma-separated list of class names"

    def samples(self) -> list[Any]:
        return [["BertLayer"], ["LlamaDecoderLayer"], ["GPT2Block", "Linear"]]


@dataclass(frozen=True)
class Table(Kind):
    """A nested mapping passed through as is (DeepSpeed's own ``bf16``/``fp16`` sections)."""

    def coerce(self, raw: Any) -> dict[str, Any]:
        if isinstance(raw, Mapping) and all(isinstance(k, str) for k in raw):
            return dict(raw)
        raise ValueError(f"expected a mapping, got {brief(raw)}")

    def describe(self) -> str:
        return "a mapping of keys to values"

    def samples(self) -> list[Any]:
        return [{"enabled": True}, {"enabled": False}, {"enabled": True, "loss_scale": 0}]


@dataclass(frozen=True)
class Strings(Kind):
    """A list of strings, possibly empty (a YAML list, or one string as a list of one)."""

    def coerce(self, raw: Any) -> list[str]:
        if raw is None:
            return []
        if isinstance(raw, str):
            return [raw]
        if isinstance(raw, list | tuple) and all(isinstance(i, str) for i in raw):
            return list(raw)
        raise ValueError(f"expected a list of strings, got {brief(raw)}")

    def describe(self) -> str:
        return "a list of strings"

    def samples(self) -> list[Any]:
        return [[], ["A=1"], ["A=1", "B=2"]]


SHARDING_STRATEGIES = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
)


@dataclass(frozen=True)
class ReshardOrStrategy(Kind):
    """``fsdp_reshard_after_forward``: a boolean (FSDP2), or, as Hugging Face Accelerate's
    wizard writes it for FSDP1, a sharding strategy's name or number (kept as the name; a
    rule turns it into the strategy and the boolean it implies)."""

    def coerce(self, raw: Any) -> bool | str:
        try:
            return Bool().coerce(raw)
        except ValueError:
            pass
        try:
            return Choice(SHARDING_STRATEGIES, numbered=True).coerce(raw)
        except ValueError:
            raise ValueError(
                f"expected true/false or a sharding strategy ({', '.join(SHARDING_STRATEGIES)}), "
                f"got {brief(raw)}"
            ) from None

    def describe(self) -> str:
        return "true/false, or (FSDP1) a sharding strategy: " + ", ".join(SHARDING_STRATEGIES)

    def samples(self) -> list[Any]:
        return [True, False]  # a strategy's name is another spelling: a rule resolves it


@dataclass(frozen=True)
class AsWritten(Kind):
    """Any value, kept as written: for settings overdrive only reports (they cannot take
    effect here), whose shape is the other system's business."""

    def coerce(self, raw: Any) -> Any:
        return list(raw) if isinstance(raw, tuple) else raw

    def describe(self) -> str:
        return "any value"

    def samples(self) -> list[Any]:
        return [[False, False, False], "x", 1]
