"""Every check a launch makes before any worker starts, in one function.

``overdrive launch`` plans through ``plan_launch``, and ``overdrive config validate`` runs the
same function on the same resolved settings, so a file that validates is a file the launcher
accepts on this machine (and a refusal reads the same in both).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

from overdrive.config import Settings
from overdrive.config.backend import requested_backend
from overdrive.config.inert import inert_sections, no_effect_notes
from overdrive.config.types import DistributedType
from overdrive.ds.config import build
from overdrive.errors import ConfigError
from overdrive.launch.plan import LaunchPlan, build_plan
from overdrive.parallel.fsdp_policy import policy_from_settings
from overdrive.preflight.backends import check_available


def _stderr_warning(text: str) -> None:
    sys.stderr.write(f"overdrive: warning: {text}\n")
    sys.stderr.flush()


def _check_compile(settings: Settings) -> None:
    """The dynamo backend exists and the dynamo options fit it (each worker checks again)."""
    if settings["dynamo_config.dynamo_backend"] == "no":
        return
    # deferred: keeps overdrive.preflight.launch torch-free (overdrive.compile.model imports torch)
    from overdrive.compile.model import compile_kwargs

    compile_kwargs(settings)


def _check_precision(settings: Settings, device: str) -> None:
    if settings["mixed_precision"] != "fp8" or device != "cpu":
        return
    import torch

    # deferred: keeps overdrive.preflight.launch torch-free
    from overdrive.precision.fp8 import check_fp8_available

    # Refuse here rather than in every worker: fp8 needs a recent GPU.
    check_fp8_available(torch.device("cpu"), str(settings.source("mixed_precision")))


def _check_fsdp(settings: Settings) -> None:
    """The fsdp_config settings hold together (each worker builds the same policy again)."""
    if requested_backend(settings) is not DistributedType.FSDP:
        return

    policy_from_settings(settings)


def _check_deepspeed(settings: Settings, warn: Callable[[str], None]) -> None:
    """DeepSpeed is installed and its config holds together (the JSON against the settings)."""
    if requested_backend(settings) is not DistributedType.DEEPSPEED:
        return
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            f"distributed_type DEEPSPEED ({settings.source('distributed_type')}) needs the "
            "deepspeed package, which is not installed",
            key="distributed_type",
            fix="pip install 'overdrive[deepspeed]' (or deepspeed>=0.16)",
        )
    for note in build(settings).notes:
        warn(note)


def warn_inert(settings: Settings, warn: Callable[[str], None] = _stderr_warning) -> None:
    """Settings that are valid but cannot take effect, one message each to ``warn``: what
    ``overdrive launch``, ``config validate`` and ``config show`` all say about a file."""
    for note in [*inert_sections(settings), *no_effect_notes(settings)]:
        warn(note)


def plan_launch(
    settings: Settings,
    target: str,
    script_args: Sequence[str] = (),
    *,
    is_module: bool = False,
    gpu_count: int = 0,
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    environ: Mapping[str, str] | None = None,
    oversubscribe: bool = False,
    rank_prefix: bool | None = None,
    log_dir: str | None = None,
    warn: Callable[[str], None] = _stderr_warning,
    simulated_device: str | None = None,
) -> LaunchPlan:
    """Check the settings as a launch on this machine would, and plan it.

    Raises the first refusal (backend not available, machines or processes that do not fit,
    a precision or compile option this machine cannot run); settings that are valid but
    cannot take effect go to ``warn`` (stderr by default), one message each.
    ``simulated_device`` (a simulation's ``--simulate_device``): the device the precision
    check takes the processes to run on, where it is not this machine's.
    """
    check_available(settings)
    # the plan decides the parallel layout too: a layout that cannot factor stops there
    plan = build_plan(
        settings,
        target,
        script_args,
        is_module=is_module,
        gpu_count=gpu_count,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        environ=environ,
        oversubscribe=oversubscribe,
        rank_prefix=rank_prefix,
        log_dir=log_dir,
    )
    _check_precision(settings, simulated_device or plan.device)
    _check_compile(settings)
    _check_fsdp(settings)
    _check_deepspeed(settings, warn)
    warn_inert(settings, warn)
    return plan
