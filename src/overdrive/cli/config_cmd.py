"""`overdrive config`: the wizard, and `default`, `show`, `validate`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from overdrive.cli.flags import add_flag
from overdrive.cli.simulate_validate import (
    add_validate_simulation,
    check_simulation_arguments,
    simulate_validated,
)
from overdrive.config import load_settings, resolve
from overdrive.config.backend import requested_backend
from overdrive.config.prompts import MenuPrompter, StreamPrompter
from overdrive.config.schema import MIXED_PRECISIONS
from overdrive.config.settings import Settings, display_value
from overdrive.config.sources import config_in_use, default_config_path, parse_config_text
from overdrive.config.types import DistributedType
from overdrive.config.wizard import run_wizard
from overdrive.ds.config import build
from overdrive.ds.finish import describe
from overdrive.errors import ConfigError
from overdrive.launch import cluster
from overdrive.launch.plan import process_limit
from overdrive.preflight.launch import plan_launch, warn_inert

_NO_GPUS = (DistributedType.NO, DistributedType.MULTI_CPU)


def register(commands: Any) -> None:
    """Add `config` and its subcommands to the CLI."""
    parser = commands.add_parser(
        "config",
        help="create or inspect a config file",
        description="Without a subcommand: answer questions and write a config file.",
    )
    add_flag(parser, "config_file", help="where to write (default: the user's default file)")
    add_flag(parser, "force", action="store_true", help="overwrite an existing file")
    add_flag(
        parser, "gpu_questions", action="store_true",
        help="on a machine without GPUs, also ask about DeepSpeed, FSDP, Megatron-LM and fp8",
    )  # fmt: skip
    parser.set_defaults(handler=_wizard)
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")

    default = sub.add_parser("default", help="write a config with defaults for this machine")
    add_flag(default, "config_file", help="where to write (default: the user's default file)")
    add_flag(default, "mixed_precision", choices=MIXED_PRECISIONS, default="no")
    add_flag(  # `config --force default` and `config default --force` both count
        default, "force", action="store_true", default=argparse.SUPPRESS,
        help="overwrite an existing file",
    )  # fmt: skip
    default.set_defaults(handler=_default)

    show = sub.add_parser("show", help="show every resolved setting and where it came from")
    add_flag(show, "config_file", help="config file to use (default: the user's default file)")
    add_flag(show, "json", action="store_true", help="print JSON for machines")
    add_flag(show, "changed", action="store_true", help="only settings not at their default")
    show.set_defaults(handler=_show)

    validate = sub.add_parser(
        "validate",
        help="check a config file; exit 0 if it is valid",
        description="Resolve the file with the environment (as `overdrive launch --config_file "
        "FILE` does) and run every check the launcher runs before it starts a worker, for the "
        "machine the file describes (a GPU file validates on a login node or CI runner, with "
        "a note on what this machine lacks). --this_machine checks it against this machine.",
    )
    validate.add_argument("file", help="the config file to check")
    add_flag(
        validate, "this_machine", action="store_true",
        help="also require this machine to run it: its GPUs and CPU cores",
    )  # fmt: skip
    add_validate_simulation(validate)
    validate.set_defaults(handler=_validate)


def _target(args: argparse.Namespace) -> Path:
    given = getattr(args, "config_file", None)
    return Path(given) if given else default_config_path(os.environ)


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write YAML (JSON for a ``.json`` path), then read it back through the resolver so a
    bad file is never left behind."""
    if path.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False)
    resolve(file=parse_config_text(text, path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _refuse_overwrite(path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise ConfigError(
            f"config file {path} already exists",
            key="config_file",
            fix="pass --force to overwrite it, or --config_file to write elsewhere",
        )


def _wizard(args: argparse.Namespace) -> int:
    path = _target(args)
    _refuse_overwrite(path, args.force)  # before any question: no answers are wasted
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    prompter = MenuPrompter() if interactive else StreamPrompter(sys.stdin, sys.stdout)
    gpus = _gpu_count()
    if not gpus and not args.gpu_questions:
        print(
            "No GPU here: a run on this machine's CPUs is not asked about DeepSpeed, FSDP, "
            "Megatron-LM or fp8 (choose multi-GPU to configure a GPU machine, or pass "
            "--gpu_questions)"
        )
    answers = run_wizard(prompter, gpu_count=gpus, gpu_questions=args.gpu_questions)
    _write(path, answers)
    print(f"config written to {path}")
    return 0


def default_answers(gpu_count: int, mixed_precision: str) -> dict[str, Any]:
    """Sensible settings for a machine with ``gpu_count`` GPUs."""
    data: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE"}
    if gpu_count > 1:
        data.update(distributed_type="MULTI_GPU", num_processes=gpu_count, gpu_ids="all")
    elif gpu_count == 1:
        data.update(distributed_type="NO", num_processes=1)
    else:
        data.update(distributed_type="MULTI_CPU", num_processes=2, use_cpu=True)
    data.update(num_machines=1, machine_rank=0, mixed_precision=mixed_precision)
    data.update(rdzv_backend="static", same_network=True, debug=False)
    return data


def _default(args: argparse.Namespace) -> int:
    path = _target(args)
    _refuse_overwrite(path, args.force)
    _write(path, default_answers(_gpu_count(), args.mixed_precision))
    print(f"config written to {path}")
    return 0


def render_table(settings: Settings, *, changed_only: bool) -> str:
    """The settings as an aligned three-column table: key, value, source."""
    rows = [
        (key, display_value(value), source)
        for key, value, source in settings.rows()
        if not changed_only or source != "default"
    ]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(("setting", "value"))]
    lines = [f"{'setting':<{widths[0]}}  {'value':<{widths[1]}}  source"]
    lines += [f"{k:<{widths[0]}}  {v:<{widths[1]}}  {s}" for k, v, s in rows]
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    settings = load_settings(config_file=args.config_file, flags={})
    warn_inert(settings)  # on stderr, in `config validate`'s words; stdout stays the table
    if args.json:
        payload = {
            key: {"value": value, "source": source}
            for key, value, source in settings.rows()
            if not args.changed or source != "default"
        }
        print(json.dumps(payload, indent=2))
        return 0
    file_used = Path(args.config_file) if args.config_file else config_in_use(os.environ)
    print(f"config file: {file_used}{'' if file_used.is_file() else ' (not found, not used)'}")
    print("precedence: code > launch flag > environment > config file > default\n")
    print(render_table(settings, changed_only=args.changed))
    if requested_backend(settings) is DistributedType.DEEPSPEED:
        print()
        print("\n".join(describe(build(settings))))
    return 0


VALIDATE_TARGET = "train.py"
"""Stands in for the script: no check of a launch depends on which script it runs."""


def _gpus_described(settings: Settings) -> int:
    """GPUs per machine the file is written for: one per process of a backend run on GPUs
    (anything but NO / MULTI_CPU, unless it asks for the CPU)."""
    if settings["use_cpu"] or requested_backend(settings) in _NO_GPUS:
        return 0
    total = settings["num_processes"]
    return max(1, (total or 1) // max(1, settings["num_machines"]))


def _validate(args: argparse.Namespace) -> int:
    check_simulation_arguments(args)
    settings = load_settings(config_file=args.file, flags={})
    here = cluster.gpu_count(settings)
    notes: list[str] = []
    gpus, oversubscribe = here, False
    if args.this_machine:
        plan_launch(settings, VALIDATE_TARGET, gpu_count=here)
    else:
        described = _gpus_described(settings)
        gpus, oversubscribe = max(here, described), True
        plan = plan_launch(settings, VALIDATE_TARGET, gpu_count=gpus, oversubscribe=True)
        if described > here:
            notes.append(
                f"it is written for {described} GPU(s) per machine; this machine has {here} visible"
            )
        limit = process_limit(os.cpu_count() or 1)
        if plan.device == "cpu" and plan.nproc_per_node > limit:
            notes.append(
                f"it starts {plan.nproc_per_node} CPU processes per machine; this machine "
                f"starts at most {limit} without --oversubscribe"
            )
    changed = sum(1 for _, _, source in settings.rows() if source != "default")
    where = "on this machine" if args.this_machine else "on the machine it describes"
    print(
        f"{args.file}: valid ({changed} settings set, the rest at their defaults; checked as "
        f"`overdrive launch --config_file {args.file}` would use it {where})"
    )
    for note in notes:
        print(
            f"note: {note}. `overdrive config validate --this_machine {args.file}` checks it "
            "against this machine"
        )
    if args.simulate:
        return simulate_validated(args, settings, gpu_count=gpus, oversubscribe=oversubscribe)
    return 0
