"""Hugging Face Accelerate's ``accelerate.utils.launch`` helpers, answered from overdrive's own
launch plan: the command and environment a worker gets are the ones ``overdrive launch``
would give it (``LaunchPlan.worker_command`` / ``shared_env``), not a second recipe."""

from __future__ import annotations

import argparse
import os
import subprocess  # tests patch overdrive.utils.launch.subprocess
import sys
from collections.abc import Callable
from shutil import which  # tests patch overdrive.utils.launch.which
from typing import Any

from overdrive.cli.launch_namespace import settings_from_args
from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.launch import cluster
from overdrive.launch.plan import LaunchPlan
from overdrive.launch.ports import free_port, settle_port
from overdrive.preflight.launch import plan_launch

_MULTI_PROCESS = (
    "MULTI_GPU",
    "MULTI_MLU",
    "MULTI_MUSA",
    "MULTI_NPU",
    "MULTI_XPU",
    "MULTI_CPU",
    "MULTI_NEURON",
)


def _plan(args: argparse.Namespace, settle: bool = True) -> LaunchPlan:
    """Plan the launch ``args`` (Hugging Face Accelerate's launch namespace) asks for;
    ``settle``: with the port checked (and moved where one machine runs)."""
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
    return settle_port(plan) if settle else plan


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
    hostfile = settings_from_args(args)["mpirun_config.mpirun_hostfile"]
    plan = _plan(args, settle=hostfile is None)  # mpirun's hosts are not this machine's ports
    env = {**os.environ, **plan.shared_env()}
    if plan.world_size > 1:
        env["MASTER_ADDR"] = plan.main_addr
        env["MASTER_PORT"] = str(plan.main_port)
    if hostfile is None:
        return plan.worker_command(), env
    # mpirun starts the script itself on every host; overdrive reads the rank it gets from
    # MPI's variables. (`overdrive launch` starts its own processes and does not use mpirun.)
    script = ["-m", plan.target] if plan.is_module else [plan.target]
    command = [*_mpirun_prefix(hostfile, plan), sys.executable, *script, *plan.script_args]
    return command, env


def _mpirun_prefix(hostfile: str, plan: LaunchPlan) -> list[str]:
    """Hugging Face Accelerate's mpirun line for ``plan`` (Open MPI's option names, or Intel
    MPI's and MVAPICH's)."""
    apps = [name for name in ("mpirun", "mpiexec") if which(name)]
    if not apps:
        raise OSError(
            f"mpirun_hostfile is set ({hostfile}) but neither mpirun nor mpiexec is on PATH; "
            "install Intel MPI, Open MPI or MVAPICH, or remove mpirun_hostfile"
        )
    open_mpi = b"Open MPI" in subprocess.check_output([apps[0], "--version"])
    hostfile_arg, count_arg, per_node_arg = (
        ("--hostfile", "-n", "--npernode") if open_mpi else ("-f", "-n", "-ppn")
    )
    command = [apps[0], hostfile_arg, hostfile, per_node_arg, str(plan.nproc_per_node)]
    command += [count_arg, str(plan.world_size)]
    return [*command, "--bind-to", "socket"] if open_mpi else command


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


def prepare_deepspeed_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """(command, environment) of a DeepSpeed launch of ``args``: the worker command and
    environment ``overdrive launch --use_deepspeed`` gives every process (overdrive starts
    DeepSpeed workers with its own launcher, never the ``deepspeed`` runner, so the command
    is never None). Sets ``args.master_port``."""
    _refuse_no_python(args)
    settings = getattr(args, "resolved_settings", None)
    if settings is not None and requested_backend(settings) is not DistributedType.DEEPSPEED:
        raise ValueError(
            f"prepare_deepspeed_cmd_env got launch arguments that resolve to distributed_type "
            f"{settings['distributed_type']} ({settings.source('distributed_type')}); pass "
            "--use_deepspeed (or set it in the config file) for a DeepSpeed launch"
        )
    if settings is None:
        args.use_deepspeed = True
    plan = _plan(args)
    args.master_port = str(plan.main_port)
    env = {
        **os.environ,
        **plan.shared_env(),
        "MASTER_ADDR": plan.main_addr,
        "MASTER_PORT": str(plan.main_port),
        "PYTHONPATH": env_var_path_add("PYTHONPATH", os.path.abspath(".")),
        "ACCELERATE_USE_DEEPSPEED": "true",
    }
    return plan.worker_command(), env


def setup_fp8_env(args: argparse.Namespace, current_env: dict[str, str]) -> dict[str, str]:
    """``current_env`` with an ``ACCELERATE_FP8_<NAME>`` variable for each ``fp8_<name>``
    option set in ``args`` (``fp8_override_linear_precision``'s three values become
    ``..._FPROP``, ``..._DGRAD`` and ``..._WGRAD``); changed in place and returned."""
    for name, value in vars(args).items():
        if not name.startswith("fp8_") or value is None:
            continue
        if name == "fp8_override_linear_precision":
            for gemm, flag in zip(("FPROP", "DGRAD", "WGRAD"), value):
                current_env[f"ACCELERATE_FP8_OVERRIDE_{gemm}"] = str(flag)
        else:
            current_env[f"ACCELERATE_{name.upper()}"] = str(value)
    return current_env


def prepare_extend_env_parallelism_config(
    args: argparse.Namespace, current_env: dict[str, str]
) -> dict[str, str]:
    """``current_env`` with the ``PARALLELISM_CONFIG_*`` variables of ``args``'s
    ``parallelism_config_*`` options (the context / sequence parallel details only when that
    degree is above 1); changed in place and returned."""
    prefix = "PARALLELISM_CONFIG_"
    current_env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true"
    for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend",
                 "sp_size", "sp_backend"):  # fmt: skip
        current_env[prefix + name.upper()] = str(getattr(args, f"parallelism_config_{name}"))
    if args.parallelism_config_cp_size > 1:
        current_env[prefix + "CP_COMM_STRATEGY"] = str(args.parallelism_config_cp_comm_strategy)
    if args.parallelism_config_sp_size > 1:
        for name in ("sp_seq_length", "sp_seq_length_is_variable", "sp_attn_implementation"):
            current_env[prefix + name.upper()] = str(getattr(args, f"parallelism_config_{name}"))
    return current_env


def env_var_path_add(env_var_name: str, path_to_add: str) -> str:
    """The value of the ``:``-separated path variable ``env_var_name`` with ``path_to_add``
    appended (empty entries dropped); ``os.environ`` is not changed."""
    paths = [p for p in os.environ.get(env_var_name, "").split(":") if p]
    return ":".join([*paths, str(path_to_add)])


class PrepareForLaunch:
    """``launcher`` made ready to run as process ``index`` of a forked launch
    (``notebook_launcher``, ``debug_launcher``): it is called as ``(index, *args)`` and calls
    ``launcher(*args)`` after setting ``LOCAL_RANK``/``RANK`` (from ``NPROC`` and
    ``NODE_RANK``) for a multi-process ``distributed_type``, or, with ``debug``, joining a gloo
    group through the file store named by ``ACCELERATE_DEBUG_RDV_FILE``."""

    def __init__(
        self, launcher: Callable[..., Any], distributed_type: Any = "NO", debug: bool = False
    ) -> None:
        self.launcher = launcher
        self.distributed_type = DistributedType(distributed_type)
        self.debug = debug

    def __call__(self, index: int, *args: Any) -> None:
        if self.debug:
            import torch.distributed as dist

            world_size = int(os.environ["WORLD_SIZE"])
            store = dist.FileStore(os.environ["ACCELERATE_DEBUG_RDV_FILE"], world_size)
            dist.init_process_group("gloo", rank=index, store=store, world_size=world_size)
        elif self.distributed_type in _MULTI_PROCESS:
            os.environ["LOCAL_RANK"] = str(index)
            nproc = int(os.environ.get("NPROC", 1))
            node_rank = int(os.environ.get("NODE_RANK", 0))
            os.environ["RANK"] = str(nproc * node_rank + index)
        os.environ["FORK_LAUNCHED"] = str(1)
        self.launcher(*args)


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
