"""Hugging Face Accelerate's ``accelerate.commands.launch`` as functions: ``launch_command_parser``
(its option names, each a field of the parsed namespace), ``_validate_launch_command`` and
``launch_command``, which runs the launch through ``overdrive launch``'s one path (the same
resolution, preflight and launcher)."""

from __future__ import annotations

import argparse
import copy
import logging
import subprocess
import sys
from typing import Any

from overdrive.cli import launch_cmd
from overdrive.cli.command_parser import command_parser
from overdrive.cli.flags import TYPED_FLAGS
from overdrive.cli.launch_cmd import _dest
from overdrive.cli.launch_defaults import with_parse_defaults
from overdrive.cli.launch_namespace import _given, given_flags, settings_from_args
from overdrive.cli.launch_options import (
    GENERAL,
    GROUPS,
    LAUNCHER_OPTIONS,
    add_option,
    container_for,
    flag_settings,
    launch_options,
)
from overdrive.config import Settings
from overdrive.errors import ConfigError

DESCRIPTION = (
    "Run a training script on several processes (CPU or GPU) and machines. Every option "
    "also takes its dashed spelling (--num-processes for --num_processes); help lists one."
)

FORMAT = "%(message)s"
"""The log record format of the launch command's messages."""

logger = logging.getLogger(__name__)

options_to_group = {
    "multi_gpu": "Distributed GPUs",
    "tpu": "TPU",
    "use_deepspeed": "DeepSpeed Arguments",
    "use_fsdp": "FSDP Arguments",
    "use_megatron_lm": "Megatron-LM Arguments",
    "fp8_backend": "FP8 Arguments",
}
"""A switch on the command line -> the help group it brings into ``--help``."""

_ALWAYS_SHOWN = (
    "Hardware Selection Arguments",
    "Resource Selection Arguments",
    "Training Paradigm Arguments",
    "positional arguments",
    "optional arguments",
    "options",
)
_SELECTING = ("Hardware Selection Arguments", "Training Paradigm Arguments")


def clean_option(option: str) -> str | None:
    """A long option as its destination (``--num-processes`` -> ``num_processes``); None for
    anything that is not a long option. Every ``--fp8_backend...`` spelling is
    ``fp8_backend``."""
    if "fp8_backend" in option:
        option = "--fp8_backend"
    if option.startswith("--"):
        return option[2:].split("=", 1)[0].replace("-", "_")
    return None


def _command_line() -> list[str]:
    """The launch command's own arguments on this process's command line."""
    args = sys.argv[1:]
    if "launch" in args[:1]:  # `overdrive launch ...` / `accelerate launch ...`
        args = args[1:]
    return args


class CustomHelpFormatter(argparse.HelpFormatter):
    """Help for ``launch`` that lists each option in one spelling (``--num_processes``, not
    its twin ``--num-processes``) and, when ``--help`` comes with other options, shows only
    what they concern: the groups their switches select (``--use_fsdp`` brings "FSDP
    Arguments"), the general groups, and of the hardware and paradigm switches only those
    given (marked "currently selected"); a group left empty is not shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.titles = list(_ALWAYS_SHOWN)

    def add_argument(self, action: argparse.Action) -> None:
        args = _command_line()
        if len(args) > 1 and ("-h" in args or "--help" in args):
            given = {clean_option(a) for a in args}
            chosen = [options_to_group[o] for o in options_to_group if o in given]
            title = getattr(getattr(action, "container", None), "title", None)
            typed = set(action.option_strings) & {a.split("=", 1)[0] for a in args}
            if title not in (*self.titles, *chosen):
                action.help = argparse.SUPPRESS
            elif title in _SELECTING and action.help != argparse.SUPPRESS:
                action.help = f"{action.help} (currently selected)" if typed else argparse.SUPPRESS
        if action.option_strings:
            shown = [o for o in action.option_strings if not (o.startswith("--") and "-" in o[2:])]
            if shown:
                action = copy.copy(action)
                action.option_strings = shown
        super().add_argument(action)


OneSpellingHelpFormatter = CustomHelpFormatter


def launch_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``launch`` arguments under Hugging Face Accelerate's names (``args.num_processes``,
    ``args.multi_gpu``, ``args.training_script``, ...), in its help groups."""
    kwargs: dict[str, Any] = {"formatter_class": CustomHelpFormatter, "allow_abbrev": False}
    parser = command_parser(subparsers, "launch", DESCRIPTION, launch_command, **kwargs)
    groups: dict[str, Any] = {GENERAL: parser}
    groups.update((title, parser.add_argument_group(title)) for title in GROUPS)
    exclusive: dict[str, Any] = {}
    for option in launch_options():  # each lands on its own name: args.<name>
        add_option(container_for(groups[option.group], option, exclusive), option)
    parser.add_argument("training_script", help="the script (or module with -m) to run")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER, help="its arguments")
    return with_parse_defaults(parser)


def _validate_launch_command(
    args: argparse.Namespace,
) -> tuple[argparse.Namespace, Settings, bool]:
    """Resolve ``args`` with the environment and config file: every option then holds the
    value the launch uses. Returns (args, the resolved Settings, whether mixed_precision
    came from the config file).

    As Hugging Face Accelerate's, it merges and does not refuse a process count given beside
    a file's ``distributed_type: NO`` (it then plans one process, as Hugging Face Accelerate's
    simple launcher runs); ``launch_command`` still refuses to start that launch.
    """
    try:
        settings = settings_from_args(args)
        typed_count = None
    except ConfigError as error:
        typed_count = _given(args, "num_processes")
        if error.key != "distributed_type" or typed_count is None:
            raise
        args.num_processes = None
        settings = settings_from_args(args)
    for name, setting in flag_settings():
        setattr(args, name, settings[setting.key])
    if typed_count is not None:
        args.num_processes = typed_count
    args.resolved_settings = settings
    from_file = settings.source("mixed_precision").kind == "file"
    return args, settings, from_file


def _launch_namespace(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` in the shape ``overdrive launch``'s handler takes."""
    flags, names = given_flags(args)
    namespace = argparse.Namespace(
        command=[args.training_script, *getattr(args, "training_script_args", [])],
        **{option.name: getattr(args, option.name, option.unset) for option in LAUNCHER_OPTIONS},
    )
    for _, setting in flag_settings():
        setattr(namespace, _dest(setting.key), flags.get(setting.key))
    setattr(namespace, TYPED_FLAGS, {_dest(key): f"--{name}" for key, name in names.items()})
    return namespace


def launch_command(args: argparse.Namespace) -> None:
    """Launch as ``overdrive launch`` would; a failed run raises ``CalledProcessError``."""
    namespace = _launch_namespace(args)
    code = launch_cmd.handle(namespace)
    if code:
        raise subprocess.CalledProcessError(code, namespace.command)


def _launch_with(args: argparse.Namespace, **changes: Any) -> None:
    """``launch_command`` with some options set first (on a copy of ``args``)."""
    changed = copy.copy(args)
    for name, value in changes.items():
        setattr(changed, name, value)
    changed.resolved_settings = None  # resolve again with the changes
    launch_command(changed)


def simple_launcher(args: argparse.Namespace) -> None:
    """Run the script as one process (Hugging Face Accelerate's launcher for a
    non-distributed run), through overdrive's launcher; a failure raises
    ``CalledProcessError``."""
    _launch_with(args, num_processes=1, multi_gpu=False)


def multi_gpu_launcher(args: argparse.Namespace) -> None:
    """Run the script on ``num_processes`` processes per machine through overdrive's
    launcher, as ``args`` describe it (DDP, FSDP, ...)."""
    _launch_with(args)


def deepspeed_launcher(args: argparse.Namespace) -> None:
    """Run the script under DeepSpeed through overdrive's launcher (one launcher per
    machine; overdrive does not start DeepSpeed's own pdsh/mpi launchers)."""
    _launch_with(args, use_deepspeed=True)


def main() -> None:
    """``python -m overdrive.commands.launch [options] script.py [args]``."""
    parser = launch_command_parser()
    launch_command(parser.parse_args())


if __name__ == "__main__":
    main()
