"""Shared helpers for configuration tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from overdrive.config import sources
from overdrive.config.resolve import resolve
from overdrive.config.settings import Settings


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def env_text(value: Any) -> str:
    """How a canonical value is written in an environment variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def resolve_layers(
    *,
    file: Path | None = None,
    env: dict[str, str] | None = None,
    flags: dict[str, Any] | None = None,
    code: dict[str, Any] | None = None,
) -> Settings:
    return resolve(
        file=sources.read_file(file, explicit=True) if file else [],
        env=sources.read_env(env or {}),
        flags=sources.from_mapping(flags or {}, "flag", "--{}"),
        code=sources.from_mapping(code or {}, "code", "Accelerator({}=...)"),
    )


@pytest.fixture
def no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the default config location at an empty temporary cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "overdrive" / "default_config.yaml"
