"""Hugging Face Accelerate's ``accelerate config`` as functions: ``get_user_input`` asks
overdrive's wizard questions and returns the answers as a ``ClusterConfig``;
``config_command`` writes them where ``overdrive launch`` reads its default config."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from overdrive.cli.command_parser import command_parser
from overdrive.cli.config_cmd import _gpu_count, _write
from overdrive.commands.config.config_args import (
    BaseConfig,
    ClusterConfig,
    SageMakerConfig,
    cache_dir,
    default_config_file,
    default_yaml_config_file,
    load_config_from_file,
)
from overdrive.config.prompts import MenuPrompter, StreamPrompter
from overdrive.config.wizard import run_wizard

__all__ = [
    "config_command",
    "config_command_parser",
    "default_config_file",
    "description",
    "get_user_input",
    "load_config_from_file",
    "main",
]

description = (
    "Ask a few questions about this machine and training setup, and save the answers as the "
    "default config file (default_config.yaml) that `overdrive launch` reads. Run it first "
    "on a new machine."
)


def get_user_input() -> BaseConfig:
    """The wizard's answers (asked on the terminal, or read from stdin when it is not
    one) as a ``ClusterConfig`` (``SageMakerConfig`` for AMAZON_SAGEMAKER)."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    prompter = MenuPrompter() if interactive else StreamPrompter(sys.stdin, sys.stdout)
    answers = run_wizard(prompter, gpu_count=_gpu_count())
    sagemaker = answers.get("compute_environment") == "AMAZON_SAGEMAKER"
    cls: Any = SageMakerConfig if sagemaker else ClusterConfig
    config: BaseConfig = cls._from_dict(answers, "the config wizard")
    return config


def config_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``config`` arguments: ``--config_file`` (where to write)."""
    parser = command_parser(subparsers, "config", description, config_command)
    parser.add_argument(
        "--config_file",
        "--config-file",
        dest="config_file",
        default=None,
        help=f"where to save the config (default: {default_yaml_config_file}, the file "
        "`overdrive launch` reads when given none)",
    )
    return parser


def config_command(args: argparse.Namespace) -> None:
    """Ask, then save: JSON for a ``.json`` path, else YAML (checked as ``overdrive launch``
    would read it before it is written)."""
    config = get_user_input()
    target = getattr(args, "config_file", None)
    if target is None:
        os.makedirs(cache_dir, exist_ok=True)
        target = default_yaml_config_file
    if str(target).endswith(".json"):
        config.to_json_file(target)
    else:
        _write(Path(target), config.to_file_dict())
    print(f"overdrive configuration saved at {target}")


def main() -> None:
    """``python -m overdrive.commands.config.config [--config_file FILE]``."""
    config_command(config_command_parser().parse_args())


if __name__ == "__main__":
    main()
