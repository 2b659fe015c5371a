"""``notebook_launcher`` and ``debug_launcher``: run a function on several processes from
inside one Python process (a notebook, a test), through torch's elastic agent.

Each child is a forked copy of this process; it finds its rank and world size in the
environment the agent gives it, as under ``overdrive launch``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from overdrive.environment.variables import patch_environment
from overdrive.errors import ConfigError
from overdrive.launch.ports import free_port, port_is_free


def _check_parent(num_processes: int) -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        raise ConfigError(
            f"notebook_launcher cannot start {num_processes} processes: CUDA was already "
            "initialised in this process, and forked children cannot use it",
            key="num_processes",
            fix="restart the notebook and call notebook_launcher before any CUDA use (build "
            "the model and Accelerator inside the launched function)",
        )


def notebook_launcher(
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str | int = "29500",
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> Any:
    """Run ``function(*args)`` on ``num_processes`` processes per machine (default: one per
    GPU, else 1). With one process it runs here, in this process.

    A failing child ends the others; the error raised is torch's ``ChildFailedError``
    naming it. ``max_restarts`` restarts the whole group after a failure.
    """
    import torch

    if num_processes is None:
        num_processes = torch.cuda.device_count() if torch.cuda.is_available() else 1
    if num_processes < 1:
        raise ConfigError(
            f"notebook_launcher(num_processes={num_processes}) must be at least 1",
            key="num_processes",
            fix="pass num_processes=1 or more",
        )
    precision = str(getattr(mixed_precision, "value", mixed_precision)).lower()
    if num_processes == 1 and num_nodes == 1:
        with patch_environment(accelerate_mixed_precision=precision):
            return function(*args)
    _check_parent(num_processes)
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if num_nodes == 1 and not rdzv_endpoint and not port_is_free(int(use_port), master_addr):
        use_port = free_port()  # one machine: any free port will do (the default may be taken)
    if rdzv_backend == "static":
        endpoint = f"{master_addr}:{use_port}"
        configs: dict[str, Any] = {"rank": node_rank}
    else:
        endpoint = rdzv_endpoint or f"{master_addr}:{use_port}"
        configs = {}
    configs.update(rdzv_conf or {})
    config = LaunchConfig(
        min_nodes=num_nodes,
        max_nodes=num_nodes,
        nproc_per_node=num_processes,
        run_id=rdzv_id,
        rdzv_endpoint=endpoint,
        rdzv_backend=rdzv_backend,
        rdzv_configs=configs,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method="fork",
        log_line_prefix_template=log_line_prefix_template,
    )
    env = {"accelerate_mixed_precision": precision}
    if not torch.cuda.is_available():
        env["accelerate_use_cpu"] = "1"
    with patch_environment(**env):
        return elastic_launch(config, entrypoint=_named(function))(*args)


def _named(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with a ``__name__`` (torch's launcher reads it; a partial has none)."""
    if hasattr(function, "__name__"):
        return function

    def entrypoint(*args: Any) -> Any:
        return function(*args)

    inner = getattr(function, "func", function)
    entrypoint.__name__ = getattr(inner, "__name__", type(function).__name__)
    return entrypoint


def debug_launcher(
    function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2
) -> Any:
    """Run ``function(*args)`` on ``num_processes`` CPU processes, with collectives checked
    (``debug`` on), to exercise distributed code on a machine without GPUs."""
    with patch_environment(accelerate_use_cpu="1", accelerate_debug_mode="1"):
        return notebook_launcher(
            function,
            args,
            num_processes=num_processes,
            use_port=free_port(),
            rdzv_backend="static",
        )


__all__ = ["debug_launcher", "notebook_launcher"]
