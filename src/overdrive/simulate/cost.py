"""``--simulate_cost FILE``: the step time a simulated rank's FLOPs and collectives would take
at the FLOP rate and bandwidths the user gives (docs/simulate.md, "Estimated step time").

The file (YAML or JSON)::

    flops_per_second: 4.0e+14     # what one rank sustains on the step's matrix products
    bandwidth:                     # bytes per second each rank sends, per group
      intra_node: 1.5e+11          # any group whose ranks share one machine
      inter_node: 2.5e+10          # any group spanning machines
      tp: 4.0e+11                  # a group by name (a mesh dimension, or "world")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from overdrive.errors import ConfigError

LOCALITY = ("intra_node", "inter_node")
GROUP_NAMES = ("world", "dp_replicate", "dp_shard", "tp", "pp", "cp", "dp", "dp_shard_cp")
EXAMPLE = "flops_per_second: 4.0e+14 and bandwidth: {intra_node: 1.5e+11, inter_node: 2.5e+10}"


@dataclass(frozen=True)
class CostModel:
    """What the user said one rank computes and sends per second."""

    path: str
    flops_per_second: float
    bandwidth: dict[str, float]


def _rate(value: Any, key: str, path: str) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        rate = 0.0
    if isinstance(value, bool) or not rate > 0 or rate == float("inf"):
        raise ConfigError(
            f"{path}: {key} is {value!r}, not a positive number\n"
            f"  fix: give {key} in per second units as a number, such as 2.5e+10"
        )
    return rate


def load_cost(path: str) -> CostModel:
    """Read and check a cost file; a wrong or missing key is one ``ConfigError``."""
    import yaml  # deferred: only a simulation with a cost file reads YAML

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(
            f"--simulate_cost {path}: cannot read it ({error.strerror})\n"
            "  fix: give the path of a YAML or JSON file holding " + EXAMPLE
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(
            f"--simulate_cost {path}: not YAML or JSON ({error})\n  fix: write {EXAMPLE}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the cost file holds no mapping\n  fix: write {EXAMPLE}")
    for key in data:
        if key not in ("flops_per_second", "bandwidth"):
            raise ConfigError(
                f"{path}: unknown key {key!r}\n"
                "  fix: the cost file takes flops_per_second and bandwidth only"
            )
    for key in ("flops_per_second", "bandwidth"):
        if key not in data:
            raise ConfigError(f"{path}: {key} is missing\n  fix: add it, such as {EXAMPLE}")
    bandwidth = data["bandwidth"]
    if not isinstance(bandwidth, dict) or not bandwidth:
        raise ConfigError(
            f"{path}: bandwidth is {bandwidth!r}, not a mapping of groups to bytes per second\n"
            "  fix: bandwidth: {intra_node: 1.5e+11, inter_node: 2.5e+10}"
        )
    for key in bandwidth:
        if key not in (*LOCALITY, *GROUP_NAMES):
            raise ConfigError(
                f"{path}: unknown key bandwidth.{key}\n"
                f"  fix: use {', '.join(LOCALITY)} or a group name: {', '.join(GROUP_NAMES)}"
            )
    rates = {str(k): _rate(v, f"bandwidth.{k}", path) for k, v in bandwidth.items()}
    flops = _rate(data["flops_per_second"], "flops_per_second", path)
    return CostModel(path, flops, rates)


def wire_bytes(kind: str, put_in: int, size: int) -> float:
    """The bytes one rank sends for a collective it put ``put_in`` bytes into, in a group of
    ``size`` ranks, by the ring algorithms' counts (NCCL's "bus bandwidth" factors)."""
    if size <= 1 and kind not in ("send", "recv"):
        return 0.0
    share = (size - 1) / size if size > 0 else 0.0
    if kind == "all_gather":
        return float(put_in * (size - 1))  # its input is one rank's shard
    if kind == "all_reduce":
        return 2.0 * put_in * share
    if kind in ("reduce_scatter", "all_to_all"):
        return put_in * share
    return float(put_in)  # broadcast, reduce, gather, scatter, send, recv: the buffer once


def _bandwidth(cost: CostModel, group: str, info: dict[str, int]) -> float:
    if group in cost.bandwidth:
        return cost.bandwidth[group]
    locality = "intra_node" if info.get("machines", 2) <= 1 else "inter_node"
    if locality in cost.bandwidth:
        return cost.bandwidth[locality]
    raise ConfigError(
        f"{cost.path}: no bandwidth for the group {group!r} (its ranks span "
        f"{info.get('machines', '?')} machine(s))\n"
        f"  fix: add bandwidth.{group} or bandwidth.{locality} to {cost.path}"
    )


def estimate(cost: CostModel, report: dict[str, Any]) -> dict[str, Any]:
    """The last simulated step's estimated time: compute (FLOPs / FLOP rate) and each
    group's communication (wire bytes / its bandwidth), added (no overlap) and overlapped."""
    step = len(report["collectives_per_step"])
    window = report["collectives_per_step"][-1] if step else {}
    flops = report["flops_per_step"][-1] if step else 0
    communication: dict[str, float] = {}
    for kind, entry in window.items():
        for group, counted in entry["groups"].items():
            if kind == "barrier":
                continue
            info = report["groups"].get(group, {})
            sent = wire_bytes(kind, counted["bytes"], info.get("size", report["world_size"]))
            seconds = sent / _bandwidth(cost, group, info)
            communication[group] = communication.get(group, 0.0) + seconds
    compute = flops / cost.flops_per_second
    total = sum(communication.values())
    return {
        "step": step,
        "flops": flops,
        "compute_s": compute,
        "communication_s": communication,
        "step_s": compute + total,
        "overlapped_step_s": max(compute, total),
    }
