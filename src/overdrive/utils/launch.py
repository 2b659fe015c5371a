"""The described system's ``accelerate.utils.launch`` helpers, answered from overdrive's own
launch plan: the command and environment a worker gets are the ones ``overdrive launch``
would give it (``LaunchPlan.worker_command`` / ``shared_env``), not a second recipe."""

from __future__ import annotations

import argparse
import os
import subprocess  # noqa: F401  (tests patch overdrive.utils.launch.subprocess)
from shutil import which  # noqa: F401  (tests patch overdrive.utils.launch.which)
from typing import Any

from overdrive.launch.plan import LaunchPlan


def _plan(args: argparse.Namespace) -> LaunchPlan:
    """Plan the launch ``args`` (the described system's launch namespace) asks for."""
    from overdrive.commands.launch import settings_from_args
    from overdrive.launch import cluster
    from overdrive.launch.ports import free_port, settle_port
    from overdrive.preflight import plan_launch

    if getattr(args, "main_process_port", None) in (0, "0"):
        args.main_process_port = free_port()  # 0 asks for any free port, as torchrun's does
    settings = settings_from_args(args)
    plan = plan_launch(
        settings,
        getattr(args, "training_script", None) or "script.py",  # only the env is asked for
        list(getattr(args, "training_script_args", []) or []),
        is_module=bool(getattr(args, "module", False)),
        gpu_count=cluster.gpu_count(settings),
        max_restarts=int(getattr(args, "max_restarts", 0) or 0),
    )
    return settle_port(plan)


def _refuse_no_python(args: argparse.Namespace) -> None:
    if getattr(args, "no_python", False) and getattr(args, "module", False):
        raise ValueError("--module and --no_python cannot be used together")
    if getattr(args, "no_python", False):
        raise ValueError(
            "--no_python: overdrive starts every worker with Python; launch the script itself"
        )


def prepare_simple_launcher_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """(command, environment) of the worker a one-machine launch of ``args`` starts; with
    several processes the rendezvous address is in it too."""
    _refuse_no_python(args)
    plan = _plan(args)
    env = {**os.environ, **plan.shared_env()}
    if plan.world_size > 1:
        env["MASTER_ADDR"] = plan.main_addr
        env["MASTER_PORT"] = str(plan.main_port)
    return plan.worker_command(), env


def prepare_multi_gpu_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of a multi-process launch of ``args``; sets ``args.master_port`` (a free
    port when ``main_process_port`` is 0)."""
    plan = _plan(args)
    args.master_port = str(plan.main_port)
    return {
        **os.environ,
        **plan.shared_env(),
        "MASTER_ADDR": plan.main_addr,
        "MASTER_PORT": str(plan.main_port),
        "WORLD_SIZE": str(plan.world_size),
        "LOCAL_WORLD_SIZE": str(plan.nproc_per_node),
    }


def _typed(text: str) -> Any:
    """``"3"`` -> 3, ``"5e-5"`` -> 5e-05, ``"True"`` -> True, anything else stays text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _convert_nargs_to_dict(nargs: list[str]) -> dict[str, Any]:
    """A script's ``--name value`` arguments as ``{name: typed value}``.

    Raises ValueError for a flag without a value (``--do_train --epochs 3``): as a dict of
    hyperparameters it has no honest reading.
    """
    result: dict[str, Any] = {}
    index = 0
    while index < len(nargs):
        item = nargs[index]
        if not item.startswith("-"):
            raise ValueError(f"{item!r} is a value without a --name before it")
        name, has_value, value = item.lstrip("-").partition("=")
        if not has_value:
            if index + 1 >= len(nargs) or nargs[index + 1].startswith("--"):
                raise ValueError(
                    f"{item} has no value; pass `{item} True` (a flag that takes no value "
                    "cannot become a hyperparameter)"
                )
            value = nargs[index + 1]
            index += 1
        result[name] = _typed(value)
        index += 1
    return result
