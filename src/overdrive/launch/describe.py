"""Say what will happen: the one-line banner and the dry-run listing."""

from __future__ import annotations

from overdrive.config import HANDOVER_VARIABLE, Settings
from overdrive.config.settings import display_value
from overdrive.launch.plan import LaunchPlan
from overdrive.parallel.layout import ParallelLayout

# Always listed by --dry_run, whatever their source.
LAUNCH_KEYS = (
    "distributed_type",
    "num_processes",
    "num_machines",
    "machine_rank",
    "main_process_ip",
    "main_process_port",
    "rdzv_backend",
    "same_network",
    "gpu_ids",
    "use_cpu",
    "mixed_precision",
    "hang_timeout",
)
# torch's default collective timeouts (``init_process_group(timeout=None)``).
DEFAULT_COLLECTIVE_TIMEOUT_S = {"gloo": 1800, "nccl": 600}


def settings_origin(settings: Settings) -> str:
    """Where the non-default settings came from, e.g. ``file cfg.yaml, flags --cpu``."""
    files: list[str] = []
    envs: list[str] = []
    flags: list[str] = []
    code: list[str] = []
    for key in settings:
        source = settings.source(key)
        if source.kind == "file":
            where = source.location
            path = where.rsplit(":", 1)[0] if ":" in where else where
            if path not in files:
                files.append(path)
        elif source.kind == "env" and source.location not in envs:
            envs.append(source.location)
        elif source.kind == "flag" and source.location not in flags:
            flags.append(source.location)
        elif source.kind == "code" and source.detail not in code:
            code.append(source.detail)
    parts = [f"file {f}" for f in files]
    if envs:
        parts.append("env " + " ".join(envs))
    if flags:
        parts.append("flags " + " ".join(flags))
    if code:
        parts.append("code " + " ".join(code))
    return ", ".join(parts) if parts else "defaults only"


def timeouts(plan: LaunchPlan) -> str:
    """``hang_timeout 300s, collective timeout 1800s (gloo default)``: the timeouts in force."""
    hang = f"hang_timeout {plan.hang_timeout}s" if plan.hang_timeout else "hang_timeout off"
    if not plan.hang_timeout and plan.settings["hang_timeout"]:
        hang += " (several machines: set it to turn it on)"
    default = DEFAULT_COLLECTIVE_TIMEOUT_S.get(plan.backend)
    collective = (
        f"collective timeout {default}s ({plan.backend} default, unless "
        "InitProcessGroupKwargs(timeout=...) sets one)"
        if default
        else "collective timeout: the backend's default"
    )
    return f"{hang}, {collective}"


def banner(plan: LaunchPlan) -> str:
    """One short line for the main machine's launcher."""
    per = f"{plan.num_machines} machines x {plan.nproc_per_node}"
    layout = f"{plan.world_size} process(es)" + (
        f" ({per})" if plan.num_machines > 1 else " on 1 machine"
    )
    # The script's code may still change mixed precision: its source says this is before code.
    precision = f"{plan.settings['mixed_precision']} ({plan.settings.source('mixed_precision')})"
    return (
        f"overdrive launch: {layout}, {plan.backend} on {plan.device}, mixed precision "
        f"{precision} unless the script sets it, rendezvous {plan.rdzv_backend} at "
        f"{plan.main_addr}:{plan.main_port}; {timeouts(plan)}; "
        f"settings from {settings_origin(plan.settings)}"
    )


def output_line(plan: LaunchPlan) -> str:
    """How the workers' output reaches the console (and the per-rank logs)."""
    how = "behind '[rank N] '" if plan.rank_prefix else "without a rank prefix"
    logs = f"; each rank's lines also go to {plan.log_dir}/rank_N.log" if plan.log_dir else ""
    return f"output: the workers' stdout and stderr in whole lines, {how}{logs}"


_MESH_ROWS = 32  # ranks listed one by one; the rest are counted


def mesh_lines(layout: ParallelLayout) -> list[str]:
    """Which rank holds which coordinate of the parallel layout (tp innermost)."""
    world_size = layout.world_size
    shown = [n for n, d in layout.degrees().items() if d > 1] or ["dp_replicate"]
    order = "pp outermost, tp innermost" if layout.pp > 1 else "tp innermost"
    lines = [f"mesh ({layout.describe()}; data-parallel degree {layout.dp_size}, {order}):"]
    for rank in range(min(world_size, _MESH_ROWS)):
        c = layout.coordinates(rank)
        where = ", ".join(f"{n} {c[n]}" for n in shown)
        lines.append(f"  rank {rank}: {where}  (reads data-parallel share {layout.dp_rank(rank)})")
    if world_size > _MESH_ROWS:
        lines.append(f"  ... and {world_size - _MESH_ROWS} more ranks")
    return lines


def dry_run_text(plan: LaunchPlan, *, show_all: bool = False) -> str:
    """Resolved settings with sources, then the exact per-process commands and environment."""
    settings = plan.settings
    keys = [k for k in settings if show_all or k in LAUNCH_KEYS or settings.is_set(k)]
    width = max(len(k) for k in keys)
    vwidth = max(len(display_value(settings[k])) for k in keys)
    lines = ["overdrive launch --dry_run: nothing was started.", "", "settings (value, source):"]
    lines += [
        f"  {k:<{width}}  {display_value(settings[k]):<{vwidth}}  {settings.source(k)}"
        for k in keys
    ]
    lines += ["", banner(plan), output_line(plan)]
    if plan.load_note:
        lines.append(f"note: {plan.load_note}")
    if plan.port_note:
        lines.append(f"note: {plan.port_note}")
    if plan.rdzv_backend == "c10d":
        lines.append(
            "note: with c10d rendezvous machines get their group rank when they join; "
            "RANK below assumes this machine joins as machine_rank."
        )
    lines += ["", *mesh_lines(plan.layout)]
    lines += ["", f"processes on this machine (machine_rank {plan.machine_rank}):"]
    lines += [f"  {plan.shell_line(local)}" for local in range(plan.nproc_per_node)]
    lines += [
        "",
        f"{HANDOVER_VARIABLE} holds the settings above as JSON "
        f"({len(settings.to_json())} characters); the launcher also sets "
        "TORCHELASTIC_* variables and an error file path per process.",
    ]
    if show_all:
        lines.append(f"{HANDOVER_VARIABLE}={settings.to_json()}")
    return "\n".join(lines)
