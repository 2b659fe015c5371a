"""The settings a parsed ``launch`` namespace asks for: the options the user gave (a parse
default is none), as flags over the environment over the config file. Hugging Face
Accelerate's ``launch`` command (``overdrive/commands/launch.py``) and its
``accelerate.utils.launch`` helpers read a namespace through these."""

from __future__ import annotations

import argparse
from typing import Any

from overdrive.cli.launch_defaults import is_parse_default
from overdrive.cli.launch_options import setting_options
from overdrive.config import Settings, load_settings


def _given(args: argparse.Namespace, name: str) -> Any:
    """A value the user gave: None, an unset switch (False) and a parse default untouched
    mean "not given"."""
    value = getattr(args, name, None)
    if value is None or value is False or is_parse_default(args, name):
        return None
    return value


def given_flags(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """(setting key -> value, setting key -> flag name) for the options given in ``args``."""
    flags: dict[str, Any] = {}
    names: dict[str, str] = {}
    for option in setting_options():
        assert option.setting is not None
        key, value = option.setting.key, _given(args, option.name)
        if value is not None and key not in flags:  # --distributed_type over --multi_gpu
            flags[key] = option.const if option.switch else value
            names[key] = option.name
    return flags, names


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The settings a launch with ``args`` runs with (flags over environment over file)."""
    resolved = getattr(args, "resolved_settings", None)
    if isinstance(resolved, Settings):
        return resolved
    flags, names = given_flags(args)
    return load_settings(
        flags=flags, flag_names=names, config_file=getattr(args, "config_file", None)
    )
