"""The simulation's report: text for the terminal, the same data as JSON."""

from __future__ import annotations

from typing import Any

from overdrive.simulate.device import DEFAULT_DEVICE, MODELS

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(count: float) -> str:
    """``count`` bytes in the largest binary unit under 1024 of it."""
    unit = 0
    while count >= 1024 and unit < len(_UNITS) - 1:
        count /= 1024
        unit += 1
    return f"{count:.0f} {_UNITS[unit]}" if unit == 0 else f"{count:.2f} {_UNITS[unit]}"


def _collectives(window: dict[str, dict[str, Any]]) -> str:
    if not window:
        return "none"
    return ", ".join(
        f"{kind} on {group} x{counted['count']} ({size(counted['bytes'])})"
        for kind, entry in window.items()
        for group, counted in entry["groups"].items()
    )


def rank_text(report: dict[str, Any]) -> str:
    """One rank's report as lines."""
    lines = [
        f"rank {report['rank']} of {report['world_size']}: {report['finished']} "
        f"({report['seconds']} s)"
    ]
    state = report["state_bytes"]
    if state:
        lines.append(
            "  held after the last step: "
            + ", ".join(f"{k.replace('_', ' ')} {size(v)}" for k, v in state.items())
        )
    for key, label in (
        ("setup_peak_bytes", "before the first forward"),
        ("peak_bytes", "in the steps"),
    ):
        peak = report[key]
        if peak:
            parts = [f"{k} {size(v)}" for k, v in peak.items() if v and k != "Total"]
            total = peak.get("Total", sum(peak.values()))
            line = f"  peak memory {label}: {size(total)} (" + ", ".join(parts) + ")"
            moment = report.get("peak_moment") if key == "peak_bytes" else None
            if moment:
                line += f", reached in {moment['module']} ({moment['phase']})"
            lines.append(line)
    reserved = report.get("reserved_bytes")
    if reserved:
        lines.append(
            f"  CUDA's reserved peak (segments of its caching allocator): "
            f"{size(reserved['setup'])} before the first forward, {size(reserved['steps'])} "
            "in the steps"
        )
    for n, window in enumerate(report["collectives_per_step"], start=1):
        label = f"step {n}" + (" (with prepare)" if n == 1 else "")
        lines.append(f"  collectives sent by this rank, {label}: {_collectives(window)}")
    if "step_time" in report:
        lines.append(step_time_text(report["step_time"]))
    lines += _checkpoint_lines(report.get("checkpoint", {}))
    return "\n".join(lines)


def _checkpoint_lines(files: dict[str, Any]) -> list[str]:
    if "not_measured" in files:
        return [f"  save_state: not measured ({files['not_measured']})"]
    if not files:
        return []
    own, main = files["own"], files["main"]
    line = f"  save_state writes {len(own)} file(s) of this rank's own ({size(sum(own.values()))})"
    if main:
        line += f" and, as the main process, {len(main)} more ({size(sum(main.values()))})"
    biggest = max({**own, **main}.items(), key=lambda item: item[1])
    return [line + f"; the largest: {biggest[0]} ({size(biggest[1])})"]


def step_time_text(estimate: dict[str, Any]) -> str:
    """The estimated step time (``cost.estimate``) as one line."""
    parts = [f"compute {estimate['compute_s']:.4g} s ({estimate['flops']:.4g} FLOP)"]
    parts += [f"{group} {seconds:.4g} s" for group, seconds in estimate["communication_s"].items()]
    return (
        f"  estimated time of step {estimate['step']}: {estimate['step_s']:.4g} s, "
        f"{estimate['overlapped_step_s']:.4g} s with communication fully overlapped ("
        + ", ".join(parts)
        + ")"
    )


def text(
    layout: str,
    reports: list[dict[str, Any]],
    checkpoint: dict[str, int] | None = None,
    device: str = DEFAULT_DEVICE,
) -> str:
    """The whole report: the layout line, the device memory is sized for, each rank, then
    the whole checkpoint's size."""
    lines = [
        f"overdrive: simulated {layout}",
        f"memory sized for {device} (--simulate_device): {MODELS[device]}",
        *map(rank_text, reports),
    ]
    if checkpoint:
        lines.append(
            f"the whole checkpoint (save_state): {checkpoint['files']} file(s), "
            f"{size(checkpoint['bytes'])}, each rank's own files taken as the nearest "
            "simulated rank's"
        )
    elif any("own" in r.get("checkpoint", {}) for r in reports):
        lines.append("the whole checkpoint: simulate rank 0 too (--simulate_ranks) to size it")
    return "\n".join(lines)
