"""Hugging Face Accelerate's ``accelerate.commands.env``: ``env_command`` prints the bug-report
text of ``overdrive env`` and returns its main facts as a dict under Hugging Face Accelerate's
keys (scripts that collect environment reports read them)."""

from __future__ import annotations

import argparse
import platform
from shutil import which
from typing import Any

import overdrive
from overdrive.cli.command_parser import command_parser
from overdrive.cli.env_cmd import report


def env_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``env`` arguments: ``--config_file``."""
    description = "Print versions, devices and the config in use, for bug reports."
    parser = command_parser(subparsers, "env", description, env_command)
    parser.add_argument("--config_file", "--config-file", dest="config_file", default=None)
    return parser


def _torch_facts() -> dict[str, str]:
    import torch

    accelerator = "CUDA" if torch.cuda.is_available() else "none (CPU)"
    facts = {"PyTorch version": torch.__version__, "PyTorch accelerator": accelerator}
    if torch.cuda.is_available():
        facts["GPU type"] = torch.cuda.get_device_name()
    return facts


def env_command(args: argparse.Namespace) -> dict[str, Any]:
    """Print the report; return its facts (``"`accelerate` bash location"`` is where the
    Hugging Face Accelerate's command is, "Not found" where it is not installed)."""
    info: dict[str, Any] = {
        "`overdrive` version": overdrive.__version__,
        "Platform": platform.platform(),
        "`overdrive` bash location": which("overdrive") or "Not found",
        "`accelerate` bash location": which("accelerate") or "Not found",
        "Python version": platform.python_version(),
        **_torch_facts(),
    }
    print(report(getattr(args, "config_file", None)))
    return info


def main() -> None:
    """``python -m overdrive.commands.env [--config_file FILE]``."""
    env_command(env_command_parser().parse_args())


if __name__ == "__main__":
    main()
