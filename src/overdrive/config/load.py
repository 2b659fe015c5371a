"""Gather every source for one resolution: the only place settings are read from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from overdrive.config import sources
from overdrive.config.provenance import RawValue, Source
from overdrive.config.resolve import resolve
from overdrive.config.settings import HANDOVER_VARIABLE, Settings
from overdrive.errors import ConfigError


def _handed_over(text: str) -> dict[str, list[RawValue]]:
    """Values the launcher resolved, regrouped by source so code can still override them."""
    try:
        handed = Settings.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"the environment variable {HANDOVER_VARIABLE} is not valid ({exc})",
            key=HANDOVER_VARIABLE,
            fix=f"unset {HANDOVER_VARIABLE}; it is written by `overdrive launch` only",
        ) from None
    layers: dict[str, list[RawValue]] = {"file": [], "env": [], "flag": [], "code": []}
    for key in handed:
        res = handed.resolved(key)
        if res.source.kind in layers:
            layers[res.source.kind].append(RawValue(key, key, res.value, res.source))
    return layers


def load_settings(
    *,
    code: Mapping[str, Any] | None = None,
    code_label: str = "Accelerator({}=...)",
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve settings from code, launch flags, the environment and the config file.

    In a worker started by ``overdrive launch`` the launcher's resolution is reused (it already
    read the flags, environment and file); ``code`` is applied on top of it. ``flag_names``
    maps a flag's setting key to the flag as typed (``deepspeed_config.zero_stage`` ->
    ``zero_stage``) so provenance reads ``flag --zero_stage``.
    """
    env = os.environ if environ is None else environ
    code_values = sources.from_mapping(code or {}, "code", code_label)
    if flags is None and config_file is None and HANDOVER_VARIABLE in env:
        layers = _handed_over(env[HANDOVER_VARIABLE])
        return resolve(
            file=layers["file"],
            env=layers["env"],
            flags=layers["flag"],
            code=[*layers["code"], *code_values],
        )
    path = config_file if config_file is not None else sources.config_in_use(env)
    return resolve(
        file=sources.read_file(path, explicit=config_file is not None),
        env=sources.read_env(env),
        flags=[
            RawValue(key, name, value, Source("flag", f"--{name}"))
            for key, value in (flags or {}).items()
            if value is not None
            for name in [(flag_names or {}).get(key, key)]
        ],
        code=code_values,
    )
