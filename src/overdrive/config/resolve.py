"""The one resolution: raw values from every source -> validated Settings with provenance.

Precedence, highest first: code > launch flag > environment > config file > default.
This module is pure: it reads no files and no environment.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from overdrive.config import rules, schema
from overdrive.config.kinds import Kind, brief_repr
from overdrive.config.provenance import DEFAULT, RawValue, Resolved, Source
from overdrive.config.settings import Settings
from overdrive.errors import ConfigError, ConfigErrors


def fix_hint(source: Source, key: str) -> str:
    """How to change a value, phrased for the place it came from."""
    if source.kind == "file":
        return f"edit `{key.rsplit('.', 1)[-1]}` in {source.detail}"
    if source.kind == "env":
        return f"change or unset the environment variable {source.detail}"
    if source.kind == "flag":
        return f"change the launch flag {source.detail}"
    if source.kind == "code":
        return f"change {source.detail} in your code"
    return f"set {key} explicitly"


def _unknown_key(raw: RawValue) -> ConfigError:
    candidates = schema.all_keys()
    section = raw.key.split(".", 1)[0] if "." in raw.key else None
    if section is not None:
        candidates = [c for c in candidates if c.startswith(section + ".")]
    close = difflib.get_close_matches(raw.key, candidates, n=1, cutoff=0.6)
    if not close and section is not None:
        # A key misplaced in the wrong section, or a section key written at top level.
        close = difflib.get_close_matches(raw.key, schema.all_keys(), n=1, cutoff=0.6)
    hint = f"did you mean `{close[0]}`?" if close else "see `overdrive config show` for all keys"
    return ConfigError(
        f"unknown setting `{raw.written_key}` ({raw.source})",
        key=raw.key,
        fix=f"{hint} ({fix_hint(raw.source, raw.key)})",
    )


def _close_words(raw: object, kind: Kind) -> list[str]:
    """Allowed words close to what was written (``FDSP`` -> ``FSDP``), as keys are suggested."""
    allowed = kind.choices() or getattr(kind, "allowed", None)
    if not allowed or not isinstance(raw, str | list | tuple):
        return []
    written = [raw] if isinstance(raw, str) else [w for w in raw if isinstance(w, str)]
    folded = {word.lower(): word for word in allowed}
    close: list[str] = []
    for word in written:
        if word.strip().lower() in folded:
            continue
        for match in difflib.get_close_matches(word.strip().lower(), list(folded), n=1, cutoff=0.6):
            close.append(folded[match])
    return close


def _coerce(raw: RawValue) -> tuple[str, Resolved]:
    key = schema.canonical_key(raw.key)
    if key is None:
        raise _unknown_key(raw)
    setting = schema.get(key)
    try:
        value = setting.kind.coerce(raw.raw)
    except (ValueError, TypeError) as exc:
        close = ", ".join(f"`{word}`" for word in _close_words(raw.raw, setting.kind))
        fix = f"use {setting.kind.describe()}; {fix_hint(raw.source, key)}"
        if close:  # the message lists the allowed words already
            fix = f"did you mean {close}? ({fix_hint(raw.source, key)})"
        raise ConfigError(
            f"invalid value for `{raw.written_key}` ({raw.source}): {exc}", key=key, fix=fix
        ) from None
    return key, Resolved(value, raw.source)


def _layer(values: Iterable[RawValue], errors: list[ConfigError]) -> dict[str, Resolved]:
    """Coerce one source's values; the same setting written twice must agree. Each value
    that fails goes to ``errors`` and the others are still read."""
    layer: dict[str, Resolved] = {}
    for raw in values:
        try:
            if raw.raw is None:  # `key: null` or an argument left at None: "not set here"
                if schema.canonical_key(raw.key) is None:
                    raise _unknown_key(raw)
                continue
            key, resolved = _coerce(raw)
        except ConfigError as exc:
            errors.append(exc)
            continue
        earlier = layer.get(key)
        if earlier is not None and earlier.value != resolved.value:
            errors.append(
                ConfigError(
                    f"`{key}` is set twice with different values: {brief_repr(earlier.value)} "
                    f"({earlier.source}) and {brief_repr(resolved.value)} ({resolved.source})",
                    key=key,
                    fix="keep one of the two spellings",
                )
            )
            continue
        layer[key] = resolved
    return layer


def _unrelated(error: ConfigError, failed: set[str]) -> bool:
    """A cross-field complaint that names no setting whose own value failed (that one fell
    back to its default, so the rule may have judged the default, not what was written)."""
    return not any(f"`{key}`" in str(error) for key in failed)


def _raise(errors: list[ConfigError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


def resolve(
    *,
    file: Sequence[RawValue] = (),
    env: Sequence[RawValue] = (),
    flags: Sequence[RawValue] = (),
    code: Sequence[RawValue] = (),
) -> Settings:
    """Merge the sources by precedence, validate, and return settings with provenance."""
    merged: dict[str, Resolved] = {s.key: Resolved(s.default, DEFAULT) for s in schema.SETTINGS}
    errors: list[ConfigError] = []
    for values in (file, env, flags, code):  # lowest precedence first
        merged.update(_layer(values, errors))
    failed = {error.key for error in errors if error.key}
    found: list[ConfigError] = []
    completed = rules.apply(merged, found)
    _raise([*errors, *(error for error in found if _unrelated(error, failed))])
    return Settings(completed)
