"""Turn each source (config file, environment, launch flags, code) into raw values with provenance.

Nothing here decides precedence or validity; ``resolve`` does. The only file-system and
environment access of the configuration system lives here and in ``load``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from overdrive.config import schema
from overdrive.config.provenance import RawValue, Source
from overdrive.errors import ConfigError

DEFAULT_CONFIG_NAME = "default_config.yaml"


def default_config_path(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/overdrive/default_config.yaml``, else ``~/.cache/overdrive/...``."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    return Path(cache).expanduser() / "overdrive" / DEFAULT_CONFIG_NAME


def _looks_like_json(path: Path, text: str) -> bool:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return True
    if suffix in (".yaml", ".yml"):
        return False
    return text.lstrip().startswith("{")


def _yaml_lines(text: str) -> dict[str, int]:
    """Line number (1-based) of every top-level and section key, where YAML can tell."""
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if not isinstance(root, yaml.MappingNode):
        return lines
    for key_node, value_node in root.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        lines[str(key_node.value)] = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.MappingNode):
            for sub_key, _ in value_node.value:
                if isinstance(sub_key, yaml.ScalarNode):
                    lines[f"{key_node.value}.{sub_key.value}"] = sub_key.start_mark.line + 1
    return lines


def _json_lines(text: str, data: Mapping[str, Any]) -> dict[str, int]:
    """Line numbers for JSON keys: the first line holding ``"key":`` after its section's line."""
    lines: dict[str, int] = {}
    text_lines = text.splitlines()

    def find(name: str, start: int) -> int | None:
        pattern = re.compile(r'"' + re.escape(name) + r'"\s*:')
        for index in range(start, len(text_lines)):
            if pattern.search(text_lines[index]):
                return index + 1
        return None

    for key, value in data.items():
        line = find(str(key), 0)
        if line is None:
            continue
        lines[str(key)] = line
        if isinstance(value, Mapping):
            for sub in value:
                sub_line = find(str(sub), line - 1)
                if sub_line is not None:
                    lines[f"{key}.{sub}"] = sub_line
    return lines


def parse_config_text(text: str, path: Path) -> list[RawValue]:
    """Parse YAML or JSON config text into raw values; syntax problems become ConfigError."""
    label = str(path)
    try:
        if _looks_like_json(path, text):
            data = json.loads(text)
            lines = _json_lines(text, data) if isinstance(data, Mapping) else {}
        else:
            data = yaml.safe_load(text)
            lines = _yaml_lines(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"config file {label} cannot be parsed: {reason}",
            fix="fix the syntax (YAML or JSON), or regenerate it with `overdrive config`",
        ) from None
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {label} must hold a mapping of settings, "
            f"but holds a {type(data).__name__}",
            fix="write one `key: value` per line, as `overdrive config default` does",
        )

    def where(key: str) -> Source:
        line = lines.get(key)
        return Source("file", f"{label}:{line}" if line else label)

    values: list[RawValue] = []
    for key, value in data.items():
        key_text = str(key)
        if key_text in schema.SECTIONS:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"`{key_text}` in {where(key_text).detail} must be a mapping of settings, "
                    f"got {value!r}",
                    key=key_text,
                    fix=f"indent the {key_text} settings under `{key_text}:`",
                )
            for sub_key, sub_value in value.items():
                dotted = f"{key_text}.{sub_key}"
                values.append(RawValue(dotted, dotted, sub_value, where(dotted)))
        else:
            values.append(RawValue(key_text, key_text, value, where(key_text)))
    return values


def read_file(path: str | Path, *, explicit: bool) -> list[RawValue]:
    """Raw values from a config file. A named file that does not exist is an error."""
    file_path = Path(path).expanduser()
    if not file_path.is_file():
        if explicit:
            raise ConfigError(
                f"config file {file_path} does not exist",
                key="config_file",
                fix="check the path (a named config file is never skipped), or create it with "
                f"`overdrive config --config_file {file_path}`",
            )
        return []
    try:
        text = file_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"config file {file_path} cannot be read: {exc}",
            key="config_file",
            fix="make the file readable UTF-8 text",
        ) from None
    return parse_config_text(text, file_path)


def read_env(environ: Mapping[str, str]) -> list[RawValue]:
    """Raw values from every ``ACCELERATE_*`` variable the schema knows."""
    known = schema.by_env()
    return [
        RawValue(setting.key, name, environ[name], Source("env", name))
        for name, setting in known.items()
        if name in environ and environ[name] != ""
    ]


def from_mapping(values: Mapping[str, Any], kind: str, describe: str) -> list[RawValue]:
    """Raw values from code keyword arguments or launch flags; None means "not given".

    ``describe`` formats the source detail from the key, e.g. ``"--{}"`` for flags or
    ``"Accelerator({}=...)"`` for code.
    """
    return [
        RawValue(key, key, value, Source(kind, describe.format(key)))  # type: ignore[arg-type]
        for key, value in values.items()
        if value is not None
    ]
