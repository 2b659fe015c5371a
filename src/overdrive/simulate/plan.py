"""``overdrive plan``: choose an FSDP2 x TP x PP layout for a model on N GPUs.

1. Candidates: every tensor-parallel degree among 1, 2, 4, 8 that fits in a machine and every
   pipeline degree among powers of two whose product with it divides N (the rest is FSDP2's
   ``dp_shard``), that ``estimate-memory``'s layout checks accept (whole heads per tp rank, a
   layer per stage).
2. Arithmetic: a candidate whose parameters, gradients and AdamW state (fp32, fully sharded,
   ``estimate-memory``'s FSDP FULL_SHARD row) alone exceed the GPU's memory is ruled out.
3. Simulation: the others, at most ``max_simulated`` (plain FSDP2 first, then growing tp,
   then growing pp), are simulated as rank 0 for one step; one fits when its peak memory in
   the step is within the GPU's memory. A pipeline needs the batch to split into one
   micro-batch per stage; a candidate whose simulation fails is reported as such.
4. The fitting candidates are ranked by the bytes rank 0 sends per step (``cost.wire_bytes``)
   or, with a cost file, by the estimated step time; the first is written as an Accelerate
   config file.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overdrive.config import load_settings
from overdrive.errors import ConfigError, LaunchError
from overdrive.memory_estimate import STRATEGIES, estimate, layout_of
from overdrive.memory_estimate.arithmetic import check_layout
from overdrive.memory_estimate.build import load_spec
from overdrive.preflight.launch import plan_launch
from overdrive.simulate.cost import estimate as estimate_time
from overdrive.simulate.cost import load_cost, wire_bytes
from overdrive.simulate.launch import simulate_plan

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)
TP_DEGREES = (1, 2, 4, 8)


def parse_memory(text: str) -> int:
    """``80GiB``, ``80GB``, ``80G`` or a byte count -> bytes (``GB`` is 10^9, ``GiB`` 2^30)."""
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(
            f"--gpu_memory {text!r} is not a size",
            key="gpu_memory",
            fix="give it as 80GiB, 80GB or a byte count",
        )
    number, unit, binary = match.groups()
    power = "KMGT".find(unit.upper()) + 1 if unit else 0
    base = 1024 if binary or not unit else 1000
    return int(float(number) * base**power)


@dataclass
class Candidate:
    """One layout and what is known of it."""

    tp: int
    pp: int
    dp_shard: int
    state_bytes: int
    verdict: str = "not simulated (over the cap)"
    peak_bytes: int | None = None
    sent_bytes: float | None = None
    step_s: float | None = None
    report: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        parts = [f"dp_shard={self.dp_shard}"]
        parts += [f"{n}={d}" for n, d in (("tp", self.tp), ("pp", self.pp)) if d > 1]
        return " x ".join(parts)


def candidates(spec: Any, gpus: int, per_machine: int) -> list[Candidate]:
    """Every layout of ``gpus`` the checks accept, with its arithmetic state bytes."""

    full_shard = next(s for s in STRATEGIES if s.name == "FSDP FULL_SHARD")
    found = []
    for pp in (2**k for k in range(gpus.bit_length())):
        for tp in TP_DEGREES:
            if tp > per_machine or gpus % (tp * pp):
                continue
            try:
                layout = layout_of(gpus, tp, pp)
                check_layout(spec, layout)
            except ConfigError:
                continue
            state = estimate(spec, layout, "fp32", full_shard).state
            found.append(Candidate(tp, pp, gpus // (tp * pp), state))
    return found


def config_text(
    candidate: Candidate, gpus: int, per_machine: int, layer: str, ip: str | None
) -> str:
    """The candidate as a Hugging Face Accelerate config file (FSDP2, the parallelism_config
    section for tp and pp)."""
    machines = max(1, gpus // per_machine)
    lines = [
        "compute_environment: LOCAL_MACHINE",
        "distributed_type: FSDP",
        f"num_machines: {machines}",
        f"num_processes: {gpus}",
        "machine_rank: 0",
        *([f"main_process_ip: {ip}"] if ip else []),
        "mixed_precision: 'no'",
        "fsdp_config:",
        "  fsdp_version: 2",
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP",
        f"  fsdp_transformer_layer_cls_to_wrap: {layer}",
        "  fsdp_reshard_after_forward: true",
        "  fsdp_state_dict_type: SHARDED_STATE_DICT",
    ]
    if candidate.tp > 1 or candidate.pp > 1:
        lines += [
            "parallelism_config:",
            f"  parallelism_config_dp_shard_size: {candidate.dp_shard}",
            f"  parallelism_config_tp_size: {candidate.tp}",
            f"  parallelism_config_pp_size: {candidate.pp}",
        ]
    return "\n".join(lines) + "\n"


def layer_class(model_path: str) -> str:
    """The class name of the model's repeated block (transformers' ``_no_split_modules``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    names = list(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ConfigError(
            f"--model {model_path}: the model names no repeated block (_no_split_modules) "
            "for FSDP2 to wrap",
            key="model",
            fix="plan a transformers causal LM whose class lists _no_split_modules",
        )
    return str(names[0])


def sent_bytes(report: dict[str, Any]) -> float:
    """The bytes rank 0 sends in its last step, over every group (``cost.wire_bytes``)."""

    window = report["collectives_per_step"][-1] if report["collectives_per_step"] else {}
    total = 0.0
    for kind, entry in window.items():
        for group, counted in entry["groups"].items():
            size = report["groups"].get(group, {}).get("size", report["world_size"])
            total += wire_bytes(kind, counted["bytes"], size)
    return total


def simulate_candidate(
    candidate: Candidate, config: str, script_args: list[str], multi_machine: bool
) -> dict[str, Any]:
    """Rank 0 of the candidate's world for one step, on this machine's CPU."""

    flags: dict[str, Any] = {"use_cpu": True}
    if multi_machine:
        flags["main_process_ip"] = "10.0.0.1"  # never contacted: no worker starts
    settings = load_settings(config_file=config, flags=flags)
    script = str(Path(__file__).with_name("plan_script.py"))
    plan = plan_launch(settings, script, script_args, gpu_count=0, oversubscribe=True)
    (report,) = simulate_plan(plan, "0", 1)
    return report


def plan_layout(
    model: str,
    gpus: int,
    memory: int,
    *,
    seq_len: int,
    batch: int,
    per_machine: int = 8,
    cost_path: str | None = None,
    max_simulated: int = 6,
) -> tuple[list[Candidate], str]:
    """Every candidate with its verdict, best first among those that fit, and the model's
    layer class."""

    cost = load_cost(cost_path) if cost_path else None
    spec = load_spec(model, library_name="transformers")
    layer = layer_class(model)
    found = candidates(spec, gpus, per_machine)
    script_args = ["--model", os.path.abspath(model), "--seq_len", str(seq_len)]
    script_args += ["--batch", str(batch)]
    simulated = 0
    with tempfile.TemporaryDirectory(prefix="overdrive-plan-") as folder:
        for candidate in found:
            if candidate.state_bytes > memory:
                candidate.verdict = "ruled out: parameters, gradients and AdamW state alone"
                continue
            if batch % candidate.pp:
                candidate.verdict = (
                    f"ruled out: a batch of {batch} does not split into {candidate.pp} "
                    "micro-batches (one per stage)"
                )
                continue
            if simulated >= max_simulated:
                continue
            simulated += 1
            config = os.path.join(folder, "candidate.yaml")
            Path(config).write_text(config_text(candidate, gpus, per_machine, layer, None))
            try:
                report = simulate_candidate(candidate, config, script_args, gpus > per_machine)
            except LaunchError:
                candidate.verdict = "the simulation failed (its error is above)"
                continue
            candidate.report = report
            candidate.peak_bytes = int(report["peak_bytes"].get("Total", 0))
            candidate.sent_bytes = sent_bytes(report)
            if cost is not None:
                candidate.step_s = estimate_time(cost, report)["step_s"]
            fits = candidate.peak_bytes <= memory
            candidate.verdict = "fits" if fits else "does not fit: simulated peak"

    def rank(c: Candidate) -> tuple[float, float]:
        key = c.step_s if c.step_s is not None else c.sent_bytes
        return (float(key or 0.0), float(c.peak_bytes or 0))

    fitting = sorted((c for c in found if c.verdict == "fits"), key=rank)
    return fitting + [c for c in found if c.verdict != "fits"], layer
