"""Turn each source (config file, environment, launch flags, code) into raw values with provenance.

Nothing here decides precedence or validity; ``resolve`` does. The only file-system and
environment access of the configuration system lives here and in ``load``.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from overdrive.config import schema
from overdrive.config.kinds import brief, brief_repr
from overdrive.config.provenance import Labelled, RawValue, Source
from overdrive.errors import ConfigError

DEFAULT_CONFIG_NAME = "default_config.yaml"
MAX_CONFIG_BYTES = 64 * 1024
"""Larger files are refused unread: a config holds a few dozen settings, a few kB."""
MAX_VALUES = 100_000
"""Values a file may hold once YAML aliases are expanded (an alias bomb holds billions)."""
_BOOL_TAG = "tag:yaml.org,2002:bool"
_YAML11_ONLY_BOOLEANS = frozenset({"yes", "no", "on", "off"})


def default_config_path(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/overdrive/default_config.yaml``, else ``~/.cache/overdrive/...``."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    return Path(cache).expanduser() / "overdrive" / DEFAULT_CONFIG_NAME


def accelerate_default_config_path(environ: Mapping[str, str]) -> Path:
    """Where Hugging Face Accelerate's ``accelerate config`` writes its default file:
    ``$HF_HOME/accelerate/default_config.yaml`` (``HF_HOME`` defaulting to
    ``$XDG_CACHE_HOME/huggingface``)."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    hf_home = environ.get("HF_HOME") or str(Path(cache) / "huggingface")
    return Path(hf_home).expanduser() / "accelerate" / DEFAULT_CONFIG_NAME


def config_in_use(environ: Mapping[str, str]) -> Path:
    """The default config file a run reads: overdrive's own, else the one a user wrote with
    Hugging Face Accelerate's ``accelerate config``, else overdrive's path (absent)."""
    own = default_config_path(environ)
    if own.is_file():
        return own
    theirs = accelerate_default_config_path(environ)
    return theirs if theirs.is_file() else own


def _looks_like_json(path: Path, text: str) -> bool:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return True
    if suffix in (".yaml", ".yml"):
        return False
    return text.lstrip().startswith("{")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: yaml.Node, label: str) -> None:
    """Refuse a document whose aliases expand it past MAX_VALUES values, or into itself.

    PyYAML builds aliases as shared references, so the bomb only goes off when something
    walks or prints the value; counting the nodes as if every alias were copied, with each
    node's count computed once, disarms it before anything else sees the value.
    """
    counts: dict[int, int] = {}
    open_nodes: set[int] = set()

    def count(node: yaml.Node) -> int:
        if id(node) in counts:
            return counts[id(node)]
        if id(node) in open_nodes:
            raise ConfigError(
                f"config file {label}:{node.start_mark.line + 1} holds an alias that refers to "
                "itself (a value that contains itself)",
                fix="write the value out instead of using a YAML anchor and alias (&name / *name)",
            )
        open_nodes.add(id(node))
        total = 1
        for child in _children(node):
            total += count(child)
            if total > MAX_VALUES:
                raise ConfigError(
                    f"config file {label}:{node.start_mark.line + 1} holds more than "
                    f"{MAX_VALUES} values once its YAML aliases are expanded",
                    fix="write the settings out without anchors and aliases (&name / *name); "
                    "a config file needs a few dozen values",
                )
        open_nodes.discard(id(node))
        counts[id(node)] = total
        return total

    count(root)


def _scalar_pairs(root: yaml.Node) -> list[tuple[str, yaml.Node, yaml.Node]]:
    """(dotted key, key node, value node) for every top-level and section entry."""
    pairs: list[tuple[str, yaml.Node, yaml.Node]] = []
    if not isinstance(root, yaml.MappingNode):
        return pairs
    for key_node, value_node in root.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        pairs.append((str(key_node.value), key_node, value_node))
        if isinstance(value_node, yaml.MappingNode):
            for sub_key, sub_value in value_node.value:
                if isinstance(sub_key, yaml.ScalarNode):
                    pairs.append((f"{key_node.value}.{sub_key.value}", sub_key, sub_value))
    return pairs


def _as_written(value_node: yaml.Node) -> str | None:
    """The word itself where YAML 1.1 turned an unquoted yes/no/on/off into a boolean."""
    if (
        isinstance(value_node, yaml.ScalarNode)
        and value_node.tag == _BOOL_TAG
        and value_node.value.lower() in _YAML11_ONLY_BOOLEANS
    ):
        return str(value_node.value)
    return None


def _load_yaml(text: str, label: str) -> tuple[Any, dict[str, int], dict[str, str]]:
    """Data, the line of each key, and the words YAML 1.1 would have turned into booleans."""
    loader = yaml.SafeLoader(text)  # the pure-Python parser: deep nesting ends in RecursionError
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}, {}
        _check_expansion(root, label)
        data = loader.construct_document(root)
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    words: dict[str, str] = {}
    for key, key_node, value_node in _scalar_pairs(root):
        lines[key] = key_node.start_mark.line + 1
        word = _as_written(value_node)
        if word is not None:
            words[key] = word
    return data, lines, words


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


def _syntax_error(label: str, exc: Exception) -> ConfigError:
    """``config file cfg.yaml:4 cannot be parsed: <problem> (line 4, column 1; <context>)``."""
    where, detail = label, ""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"{label}:{mark.line + 1}"
        reason = exc.problem or "invalid YAML"
        detail = f" (line {mark.line + 1}, column {mark.column + 1}"
        if exc.context:
            started = exc.context_mark.line + 1 if exc.context_mark is not None else None
            detail += f"; {exc.context}" + (f" started at line {started}" if started else "")
        detail += ")"
    elif isinstance(exc, json.JSONDecodeError):
        where = f"{label}:{exc.lineno}"
        reason = exc.msg
        detail = f" (line {exc.lineno}, column {exc.colno})"
    elif isinstance(exc, RecursionError):
        reason = "values are nested too deeply"
    else:
        text = str(exc).strip()
        reason = text.splitlines()[0] if text else type(exc).__name__
    return ConfigError(
        f"config file {where} cannot be parsed: {brief(reason)}{detail}",
        fix="fix the syntax (YAML or JSON), or regenerate it with `overdrive config`",
    )


def parse_config_text(text: str, path: Path) -> list[RawValue]:
    """Parse YAML or JSON config text into raw values; a bad or empty file is a ConfigError.

    Unquoted ``NO``/``yes``/``on``/``off`` (booleans to YAML 1.1) reach the settings as the
    words written, so ``distributed_type: NO`` means NO; a boolean setting reads them as
    booleans all the same.
    """
    label = str(path)
    if len(text.encode("utf-8", "replace")) > MAX_CONFIG_BYTES:
        raise _too_large(label)
    words: dict[str, str] = {}
    try:
        if _looks_like_json(path, text):
            data = json.loads(text)
            lines = _json_lines(text, data) if isinstance(data, Mapping) else {}
        else:
            data, lines, words = _load_yaml(text, label)
    except ConfigError:
        raise
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise _syntax_error(label, exc) from None
    if data is None:  # nothing, blanks, comments only, or `null`: no document at all
        raise ConfigError(
            f"config file {label} is empty: it holds no settings",
            key="config_file",
            fix="write settings into it (`overdrive config default --force --config_file "
            f"{label}` writes defaults for this machine), or delete it",
        )
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
                    f"got {brief_repr(value)}",
                    key=key_text,
                    fix=f"indent the {key_text} settings under `{key_text}:`",
                )
            for sub_key, sub_value in value.items():
                dotted = f"{key_text}.{sub_key}"
                raw = words.get(dotted, sub_value)
                values.append(RawValue(dotted, dotted, raw, where(dotted)))
        else:
            values.append(RawValue(key_text, key_text, words.get(key_text, value), where(key_text)))
    return values


def _too_large(label: str) -> ConfigError:
    return ConfigError(
        f"config file {label} is too large for a config file (over {MAX_CONFIG_BYTES // 1024} KiB)",
        key="config_file",
        fix="check the path; a config file holds a few dozen settings (keep a DeepSpeed "
        "JSON config in its own file, named by deepspeed_config_file)",
    )


def not_a_file(file_path: Path) -> ConfigError:
    """The error for a named config path that is not a readable regular file: what it is."""
    fix = "name the config file itself (a named config file is never skipped)"
    try:
        os.stat(file_path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return ConfigError(
                f"config file {file_path} is a symbolic link in a loop (following it never reaches a file)",
                key="config_file",
                fix=f"point the link at the config file (ln -sfn FILE {file_path}), or {fix}",
            )
        if file_path.is_symlink():
            return ConfigError(
                f"config file {file_path} is a symbolic link to {os.readlink(file_path)}, which "
                "does not exist",
                key="config_file",
                fix=f"point the link at an existing config file, or {fix}",
            )
        return ConfigError(
            f"config file {file_path} does not exist",
            key="config_file",
            fix="check the path (a named config file is never skipped), or create it with "
            f"`overdrive config --config_file {file_path}`",
        )
    if file_path.is_dir():
        return ConfigError(
            f"config file {file_path} is a directory, not a file",
            key="config_file",
            fix=f"{fix}, e.g. {file_path / 'default_config.yaml'}",
        )
    return ConfigError(
        f"config file {file_path} is not a regular file (a device, pipe or socket)",
        key="config_file",
        fix=f"{fix}: a YAML or JSON file",
    )


def read_file(path: str | Path, *, explicit: bool) -> list[RawValue]:
    """Raw values from a config file. A named file that does not exist is an error."""
    file_path = Path(path).expanduser()
    if not file_path.is_file():
        if explicit:
            raise not_a_file(file_path)
        return []
    try:
        with file_path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)  # never more, whatever the file's size
        if len(data) > MAX_CONFIG_BYTES:
            raise _too_large(str(file_path))
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"config file {file_path} cannot be read: {brief(str(exc))}",
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
    ``"Accelerator({}=...)"`` for code; a ``Labelled`` mapping's own labels come first.
    """
    labels = values.labels if isinstance(values, Labelled) else {}
    return [
        RawValue(key, key, value, Source(kind, labels.get(key) or describe.format(key)))  # type: ignore[arg-type]
        for key, value in values.items()
        if value is not None
    ]
