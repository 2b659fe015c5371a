"""The described system's ``accelerate.commands.launch`` as functions: ``launch_command_parser``
(its option names, each a field of the parsed namespace), ``_validate_launch_command`` and
``launch_command``, which runs the launch through ``overdrive launch``'s one path (the same
resolution, preflight and elastic agent)."""

from __future__ import annotations

import argparse
import copy
import subprocess
from typing import Any

from overdrive.cli.flags import add_flag
from overdrive.cli.launch_cmd import SWITCHES, flag_settings
from overdrive.commands.parser import command_parser
from overdrive.config import Settings, load_settings
from overdrive.config.kinds import Float, Int

DESCRIPTION = (
    "Run a training script on several processes (CPU or GPU) and machines. Every option "
    "also takes its dashed spelling (--num-processes for --num_processes); help lists one."
)


PLAIN_TYPES: dict[type, Any] = {Int: int, Float: float}
"""Numbers parse as numbers here (``args.num_processes == 4``); anything else stays the text
typed, which the settings resolution checks and converts."""


class OneSpellingHelpFormatter(argparse.HelpFormatter):
    """Help that lists ``--num_processes`` but not its twin ``--num-processes``."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        shown = [o for o in action.option_strings if not (o.startswith("--") and "-" in o[2:])]
        if not action.option_strings or not shown:
            return super()._format_action_invocation(action)
        single = copy.copy(action)
        single.option_strings = shown
        return super()._format_action_invocation(single)


def launch_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``launch`` arguments under the described system's names (``args.num_processes``,
    ``args.multi_gpu``, ``args.training_script``, ...)."""
    kwargs: dict[str, Any] = {
        "description": DESCRIPTION,
        "formatter_class": OneSpellingHelpFormatter,
        "allow_abbrev": False,
    }
    description = kwargs.pop("description")
    parser = command_parser(subparsers, "launch", description, launch_command, **kwargs)
    add_flag(parser, "config_file", default=None, help="config file (default: the cached one)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no banner")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the agent's logs")
    add_flag(parser, "multi_gpu", action="store_true", help="several GPU processes")
    for name, setting in flag_settings():
        if setting.key in SWITCHES:
            add_flag(parser, name, action="store_true", help=setting.help)
        else:
            kind = PLAIN_TYPES.get(type(setting.kind))
            add_flag(parser, name, default=None, type=kind, help=setting.help)
    add_flag(parser, "max_restarts", type=int, default=0, help="restart the group this often")
    add_flag(parser, "monitor_interval", type=float, default=0.1, help="seconds between checks")
    add_flag(parser, "dry_run", action="store_true", help="print the plan, start nothing")
    add_flag(parser, "oversubscribe", action="store_true", help="allow more CPU processes")
    add_flag(parser, "no_rank_prefix", action="store_true", help="no '[rank N] ' prefix")
    add_flag(parser, "tee", action="store_true", help="also write each rank's output to a file")
    add_flag(parser, "log_dir", default=None, help="write each rank's output to DIR/rank_N.log")
    parser.add_argument("-m", "--module", action="store_true", help="run a module (python -m)")
    add_flag(parser, "no_python", action="store_true", help="refused: workers run Python")
    parser.add_argument("training_script", help="the script (or module with -m) to run")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER, help="its arguments")
    return parser


def _given(args: argparse.Namespace, name: str) -> Any:
    """A value the user gave: None and an unset switch (False) mean "not given"."""
    value = getattr(args, name, None)
    return None if value is None or value is False else value


def given_flags(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """(setting key -> value, setting key -> flag name) for the options given in ``args``."""
    flags: dict[str, Any] = {}
    names: dict[str, str] = {}
    for name, setting in flag_settings():
        value = _given(args, name)
        if value is not None:
            flags[setting.key] = value
            names[setting.key] = name
    if _given(args, "multi_gpu") and "distributed_type" not in flags:
        flags["distributed_type"] = "MULTI_GPU"
        names["distributed_type"] = "multi_gpu"
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


def _validate_launch_command(
    args: argparse.Namespace,
) -> tuple[argparse.Namespace, Settings, bool]:
    """Resolve ``args`` with the environment and config file: every option then holds the
    value the launch uses. Returns (args, the resolved Settings, whether mixed_precision
    came from the config file)."""
    settings = settings_from_args(args)
    for name, setting in flag_settings():
        setattr(args, name, settings[setting.key])
    args.resolved_settings = settings
    from_file = settings.source("mixed_precision").kind == "file"
    return args, settings, from_file


def _launch_namespace(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` in the shape ``overdrive launch``'s handler takes."""
    from overdrive.cli.flags import TYPED_FLAGS
    from overdrive.cli.launch_cmd import _dest

    flags, names = given_flags(args)
    if getattr(args, "no_python", False):
        from overdrive.errors import LaunchError

        raise LaunchError(
            "--no_python: overdrive starts every worker with Python (its bootstrap reports "
            "failures and keeps the ranks in step)\n  fix: launch the Python script itself, or "
            "a module with -m"
        )
    namespace = argparse.Namespace(
        module=bool(getattr(args, "module", False)),
        command=[args.training_script, *getattr(args, "training_script_args", [])],
        config_file=getattr(args, "config_file", None),
        **{
            option: getattr(args, option, default)
            for option, default in (
                ("max_restarts", 0),
                ("monitor_interval", 0.1),
                ("dry_run", False),
                ("oversubscribe", False),
                ("no_rank_prefix", False),
                ("tee", False),
                ("log_dir", None),
                ("quiet", False),
                ("verbose", False),
            )
        },  # fmt: skip
    )
    for _, setting in flag_settings():
        setattr(namespace, _dest(setting.key), flags.get(setting.key))
    setattr(namespace, TYPED_FLAGS, {_dest(key): f"--{name}" for key, name in names.items()})
    return namespace


def launch_command(args: argparse.Namespace) -> None:
    """Launch as ``overdrive launch`` would; a failed run raises ``CalledProcessError``."""
    from overdrive.cli import launch_cmd

    namespace = _launch_namespace(args)
    code = launch_cmd.handle(namespace)
    if code:
        raise subprocess.CalledProcessError(code, namespace.command)
