"""``overdrive plan``: choose a layout for a model on N GPUs by arithmetic and simulation.

1. Candidates (``plan_candidates``): FSDP2 over ``dp_shard`` with HSDP replicas, tp and pp,
   each with and without activation checkpointing; FSDP2 with its parameters offloaded to
   the host; context parallelism; DeepSpeed ZeRO stages 1 to 3. Each with its arithmetic.
2. Arithmetic rules out a candidate whose training state on the GPU (and ZeRO's gradient
   bucket) alone exceeds the GPU's memory, a pipeline whose batch does not split into one
   micro-batch per stage and a context-parallel degree the sequence does not split into.
3. Simulation: the others that can be simulated, at most ``max_simulated``, fewest bytes
   sent first, are simulated as rank 0 for one step with memory sized for a CUDA GPU
   (``--simulate_device cuda``); one fits when the caching allocator's reserved peak in the
   step is within the GPU's memory. A candidate with activation checkpointing is not
   simulated when the same layout fits without it (it would only add recomputation).
   CPU offload and context parallelism are listed with their arithmetic and the reason they
   are not simulated.
4. The fitting candidates are ranked by the bytes rank 0 sends per step (``cost.wire_bytes``)
   or, with a cost file, by the estimated step time (no recomputation before recomputation,
   then the smaller peak); the first is written as an Accelerate config file.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from overdrive.config import load_settings
from overdrive.errors import ConfigError, LaunchError
from overdrive.memory_estimate.build import load_spec
from overdrive.preflight.launch import plan_launch
from overdrive.simulate.cost import estimate as estimate_time
from overdrive.simulate.cost import load_cost, wire_bytes
from overdrive.simulate.launch import simulate_plan
from overdrive.simulate.plan_candidates import Candidate, candidates
from overdrive.simulate.plan_config import config_text

__all__ = ["Candidate", "candidates", "config_text", "parse_memory", "plan_layout"]

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


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


SIMULATED_DEVICE = "cuda"
"""``overdrive plan`` sizes each candidate for a GPU: CUDA's caching allocator's reserved peak."""
NOT_SIMULATED_OFFLOAD = (
    "not simulated: the simulated rank runs on this machine's CPU, where memory offloaded to "
    "the host and the GPU's memory are one pool (arithmetic only)"
)


def simulate_candidate(
    candidate: Candidate, config: str, script_args: list[str], multi_machine: bool
) -> dict[str, Any]:
    """Rank 0 of the candidate's world for one step, on this machine's CPU, memory sized for
    a CUDA GPU."""

    flags: dict[str, Any] = {"use_cpu": True}
    if multi_machine:
        flags["main_process_ip"] = "10.0.0.1"  # never contacted: no worker starts
    settings = load_settings(config_file=config, flags=flags)
    script = str(Path(__file__).with_name("plan_script.py"))
    plan = plan_launch(
        settings,
        script,
        script_args,
        gpu_count=0,
        oversubscribe=True,
        simulated_device=SIMULATED_DEVICE,
    )
    (report,) = simulate_plan(plan, "0", 1, SIMULATED_DEVICE)
    return report


def ruled_out(candidate: Candidate, memory: int, batch: int, seq_len: int) -> str | None:
    """Why arithmetic rules the candidate out, or why it cannot be simulated; None if it can."""
    if candidate.floor_bytes > memory:
        if candidate.zero:
            return (
                "ruled out: parameters, gradients, AdamW state and ZeRO's gradient bucket "
                "(DeepSpeed's default reduce_bucket_size, 5e8 fp32 elements) alone"
            )
        return "ruled out: parameters, gradients and AdamW state alone"
    if batch % candidate.pp:
        return (
            f"ruled out: a batch of {batch} does not split into {candidate.pp} "
            "micro-batches (one per stage)"
        )
    if candidate.cp > 1 and seq_len % (2 * candidate.cp):
        return (
            f"ruled out: {seq_len} tokens do not split into 2 x {candidate.cp} equal chunks "
            "(two per context-parallel rank)"
        )
    if candidate.offload:
        return NOT_SIMULATED_OFFLOAD
    return None


def _judge(candidate: Candidate, report: dict[str, Any], memory: int, cost: Any) -> None:
    candidate.report = report
    candidate.peak_bytes = int(report["peak_bytes"].get("Total", 0))
    reserved = (report.get("reserved_bytes") or {}).get("steps")
    candidate.reserved_bytes = int(reserved) if reserved is not None else None
    candidate.sent_bytes = sent_bytes(report)
    if cost is not None:
        candidate.step_s = estimate_time(cost, report)["step_s"]
    held = candidate.peak_bytes if candidate.reserved_bytes is None else candidate.reserved_bytes
    fits = held <= memory
    candidate.verdict = "fits" if fits else "does not fit: simulated reserved peak"


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
    found = candidates(spec, gpus, per_machine, seq_len=seq_len, batch=batch)
    script_args = ["--model", os.path.abspath(model), "--seq_len", str(seq_len)]
    script_args += ["--batch", str(batch)]
    simulated = 0
    fitting_layouts: set[tuple[Any, ...]] = set()
    with tempfile.TemporaryDirectory(prefix="overdrive-plan-") as folder:
        for candidate in found:
            reason = ruled_out(candidate, memory, batch, seq_len)
            if reason is not None:
                candidate.verdict = reason
                continue
            if candidate.checkpointing and candidate.twin in fitting_layouts:
                candidate.verdict = (
                    "not simulated: the same layout fits without activation checkpointing"
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
            _judge(candidate, report, memory, cost)
            if candidate.verdict == "fits" and not candidate.checkpointing:
                fitting_layouts.add(candidate.twin)

    def rank(c: Candidate) -> tuple[float, bool, float]:
        key = c.step_s if c.step_s is not None else c.sent_bytes
        return (float(key or 0.0), c.checkpointing, float(c.reserved_bytes or c.peak_bytes or 0))

    fitting = sorted((c for c in found if c.verdict == "fits"), key=rank)
    return fitting + [c for c in found if c.verdict != "fits"], layer
