"""Hugging Face Accelerate's ``tpu-config`` command: run setup commands on every worker of a
Cloud TPU VM pod through ``gcloud compute tpus tpu-vm ssh``. overdrive does not train on TPUs;
this only builds (``--debug``: prints) and runs that one gcloud command."""

from __future__ import annotations

import argparse
import subprocess
from typing import Any

from overdrive.cli.command_parser import command_parser
from overdrive.commands.config.config_args import ClusterConfig, load_config_from_file

SETUP_DIRECTORY = "cd /usr/share"


def tpu_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``tpu-config`` arguments."""
    description = "Run commands on every worker of a TPU pod (gcloud compute tpus tpu-vm ssh)."
    parser = command_parser(subparsers, "tpu-config", description, tpu_command_launcher)
    parser.add_argument("--config_file", default=None, help="config file with tpu_* keys")
    parser.add_argument("--tpu_name", default=None, help="the TPU VM's name")
    parser.add_argument("--tpu_zone", default=None, help="its zone")
    parser.add_argument("--use_alpha", action="store_true", help="gcloud alpha")
    parser.add_argument("--command_file", default=None, help="a file of commands, one a line")
    parser.add_argument("--command", action="append", nargs="+", help="a command (repeatable)")
    parser.add_argument("--install_accelerate", action="store_true", help="pip install first")
    parser.add_argument("--accelerate_version", default="latest", help="which version")
    parser.add_argument("--debug", action="store_true", help="print the command, run nothing")
    return parser


def _commands(args: argparse.Namespace, config: Any) -> list[str]:
    if args.command_file or (not args.command and config is not None and config.command_file):
        with open(args.command_file or config.command_file, encoding="utf-8") as handle:
            return [line.strip() for line in handle if line.strip()]
    if args.command:
        return [" ".join(words) for words in args.command]
    return list(config.commands or []) if config is not None else []


def gcloud_command(args: argparse.Namespace) -> list[str]:
    """The gcloud command line ``args`` (and its config file) ask for."""
    config = load_config_from_file(args.config_file) if args.config_file else None
    cluster = config if isinstance(config, ClusterConfig) else None
    name = args.tpu_name or (cluster.tpu_name if cluster else None)
    zone = args.tpu_zone or (cluster.tpu_zone if cluster else None)
    if not name or not zone:
        raise ValueError("tpu-config needs --tpu_name and --tpu_zone (or a config file with both)")
    steps = [SETUP_DIRECTORY]
    if args.install_accelerate:
        version = args.accelerate_version
        steps.append("pip install accelerate -U" if version == "latest" else
                     f"pip install accelerate=={version}")  # fmt: skip
    steps += _commands(args, cluster)
    base = ["gcloud"] + (["alpha"] if args.use_alpha else [])
    ssh = ["compute", "tpus", "tpu-vm", "ssh", name, "--zone", zone]
    return [*base, *ssh, "--command", "; ".join(steps), "--worker", "all"]


def tpu_command_launcher(args: argparse.Namespace) -> None:
    """Run the gcloud command, or with ``--debug`` print it."""
    command = gcloud_command(args)
    if args.debug:
        print(f"Running {' '.join(command)}")
        return
    subprocess.run(command, check=True)
    print("Successfully set up pod.")
