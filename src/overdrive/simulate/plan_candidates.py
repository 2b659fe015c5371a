"""The layouts ``overdrive plan`` considers, each with its arithmetic (torch-free).

FSDP2 over ``dp_shard`` (with HSDP replicas, tensor and pipeline parallelism, activation
checkpointing), FSDP2 with its parameters offloaded to the host, context parallelism, and
DeepSpeed ZeRO stages 1 to 3. Each candidate carries what ``estimate-memory``'s arithmetic
says of it: the training state held on the GPU, the activations kept for backward (rough,
``activation_bytes``) and the bytes a rank sends per step (rough: used only to order the
simulations, cheapest first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from overdrive.errors import ConfigError
from overdrive.memory_estimate import STRATEGIES, Strategy, estimate
from overdrive.memory_estimate.arithmetic import (
    activation_bytes,
    check_layout,
    stage_counts,
)
from overdrive.memory_estimate.spec import ModelSpec
from overdrive.parallel.layout import ParallelLayout

TP_DEGREES = (1, 2, 4, 8)
ZERO_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed's default ``reduce_bucket_size``: ZeRO's gradient bucket, fp32, held in the step
(a planned file sets no bucket size)."""
FP32 = 4


@dataclass
class Candidate:
    """One layout and what is known of it."""

    tp: int
    pp: int
    dp_shard: int
    state_bytes: int
    """Parameters, gradients and AdamW state held on the GPU (fp32, arithmetic)."""
    dp_replicate: int = 1
    cp: int = 1
    checkpointing: bool = False
    """FSDP2's ``fsdp_activation_checkpointing``: every repeated layer recomputed."""
    offload: bool = False
    """FSDP2's ``fsdp_offload_params``: parameters, gradients and AdamW state on the host."""
    zero: int = 0
    """DeepSpeed's ZeRO stage; 0 for FSDP2."""
    activation_bytes: int | None = None
    comm_bytes: float = 0.0
    """The bytes a rank sends per step, by arithmetic (rough; orders the simulations)."""
    verdict: str = "not simulated (over the cap)"
    peak_bytes: int | None = None
    reserved_bytes: int | None = None
    sent_bytes: float | None = None
    step_s: float | None = None
    report: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        if self.zero:
            return f"ZeRO-{self.zero} dp={self.dp_shard}"
        parts = [f"dp_replicate={self.dp_replicate}"] if self.dp_replicate > 1 else []
        parts.append(f"dp_shard={self.dp_shard}")
        dims = (("cp", self.cp), ("tp", self.tp), ("pp", self.pp))
        parts += [f"{n}={d}" for n, d in dims if d > 1]
        extras = ["activation checkpointing"] if self.checkpointing else []
        extras += ["CPU offload"] if self.offload else []
        return " x ".join(parts) + "".join(f" + {e}" for e in extras)

    @property
    def floor_bytes(self) -> int:
        """What the GPU holds whatever the activations: the state, and ZeRO's gradient
        bucket (DeepSpeed's default ``reduce_bucket_size`` elements, fp32)."""
        return self.state_bytes + (ZERO_BUCKET_ELEMENTS * FP32 if self.zero else 0)

    @property
    def twin(self) -> tuple[Any, ...]:
        """The layout without activation checkpointing (what it recomputes to save)."""
        return (self.zero, self.dp_replicate, self.dp_shard, self.cp, self.tp, self.pp,
                self.offload)  # fmt: skip


def _strategy(name: str) -> Strategy:
    return next(s for s in STRATEGIES if s.name == name)


def checkpointed_activation_bytes(
    spec: ModelSpec, layout: ParallelLayout, batch: int, seq_len: int
) -> int | None:
    """Activations under activation checkpointing (rough, fp32): each layer keeps its input
    (``s*b*h`` values), one layer at a time is recomputed whole, and the logits are kept."""
    whole_one = activation_bytes(spec, ParallelLayout(tp=layout.tp), "fp32", batch, seq_len)
    if whole_one is None or not spec.num_layers:
        return None
    logits = seq_len * batch * (spec.vocab_size or 0) * FP32
    one_layer = (whole_one - logits) // spec.num_layers
    stage_layers = -(-spec.num_layers // layout.pp)
    inputs = stage_layers * seq_len * batch * (spec.hidden_size or 0) * FP32
    return inputs * (layout.pp if layout.pp > 1 else 1) + one_layer + logits


def comm_bytes(spec: ModelSpec, candidate: Candidate, batch: int, seq_len: int) -> float:
    """Rough bytes one rank sends per step: the sharded parameters gathered twice and the
    gradients reduce-scattered (FSDP2, ZeRO-3), all-reduced gradients and gathered
    parameters (ZeRO-1, ZeRO-2), HSDP's all-reduce across replicas, tp's four all-reduces
    of a layer's activations, pp's activations and their gradients, cp's keys and values
    passed round the ring."""
    layout = ParallelLayout(dp_shard=candidate.dp_shard * candidate.cp, tp=candidate.tp,
                            pp=candidate.pp)  # fmt: skip
    params = stage_counts(spec, layout).full * FP32
    shard = candidate.dp_shard * candidate.cp

    def ring(n: int) -> float:
        return (n - 1) / n

    passes = {0: 3, 1: 3, 2: 2, 3: 3}[candidate.zero]
    sent = passes * params * ring(shard)
    if candidate.dp_replicate > 1:
        sent += 2 * params / shard * ring(candidate.dp_replicate)
    tokens = batch * seq_len / candidate.cp
    hidden = (spec.hidden_size or 0) * FP32
    layers = -(-spec.num_layers // candidate.pp)
    if candidate.tp > 1:
        sent += 4 * layers * tokens * hidden * 2 * ring(candidate.tp)
    if candidate.pp > 1:
        sent += 2 * tokens * hidden
    if candidate.cp > 1:
        kv = hidden * (spec.num_kv_heads or 1) / max(spec.num_heads or 1, 1)
        sent += 3 * layers * 2 * tokens * kv * (candidate.cp - 1)
    return sent


def _fsdp2(
    spec: ModelSpec, gpus: int, tp: int, pp: int, replicate: int, cp: int
) -> Candidate | None:
    shard = gpus // (tp * pp * replicate * cp)
    layout = ParallelLayout(dp_shard=shard * cp, tp=tp, pp=pp)
    try:
        check_layout(spec, layout)
    except ConfigError:
        return None
    state = estimate(spec, layout, "fp32", _strategy("FSDP FULL_SHARD")).state
    return Candidate(tp, pp, shard, state, dp_replicate=replicate, cp=cp)


def _replicas(dp: int, gpus: int, per_machine: int) -> list[int]:
    """HSDP's replica counts worth trying: 2, and one replica per machine when the GPUs span
    several (each machine then holds a shard group); each leaves at least 2 shards."""
    options = {2, gpus // per_machine}
    return sorted(r for r in options if r >= 2 and dp % r == 0 and dp // r >= 2)


def candidates(
    spec: ModelSpec, gpus: int, per_machine: int, *, seq_len: int = 2048, batch: int = 1
) -> list[Candidate]:
    """Every layout of ``gpus`` the checks accept, with its arithmetic, in the order they
    would be simulated (fewest bytes sent first; without recomputation before with it)."""
    found: list[Candidate] = []
    for pp in (2**k for k in range(gpus.bit_length())):
        for tp in TP_DEGREES:
            if tp > per_machine or gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            for replicate in [1, *_replicas(dp, gpus, per_machine)]:
                plain = _fsdp2(spec, gpus, tp, pp, replicate, 1)
                if plain is not None:
                    found.append(plain)
    for cp in (2**k for k in range(1, gpus.bit_length())):
        if cp <= per_machine and gpus % cp == 0 and spec.num_heads:
            context = _fsdp2(spec, gpus, 1, 1, 1, cp)
            if context is not None:
                found.append(context)
    layered = [c for c in found if c.cp == 1]
    for c in layered:
        found.append(_with(c, checkpointing=True))
    plain = next((c for c in found if c.name == f"dp_shard={gpus}"), None)
    if plain is not None:
        found.append(_with(plain, offload=True, state_bytes=0))
        found.append(_with(plain, offload=True, checkpointing=True, state_bytes=0))
    for stage in (1, 2, 3):
        row = estimate(spec, ParallelLayout(dp_replicate=gpus), "fp32", _strategy(f"ZeRO-{stage}"))
        found.append(Candidate(1, 1, gpus, row.state, zero=stage))
    for c in found:
        c.comm_bytes = comm_bytes(spec, c, batch, seq_len)
        c.activation_bytes = _activations(spec, c, batch, seq_len)
    found.sort(key=lambda c: (c.comm_bytes, c.checkpointing, c.offload, c.zero))
    return found


def _with(candidate: Candidate, **changes: Any) -> Candidate:
    fields = {k: getattr(candidate, k) for k in Candidate.__dataclass_fields__}
    return Candidate(**{**fields, "report": {}, **changes})


def _activations(spec: ModelSpec, c: Candidate, batch: int, seq_len: int) -> int | None:
    layout = ParallelLayout(dp_shard=c.dp_shard, tp=c.tp, pp=c.pp)
    tokens = max(seq_len // c.cp, 1)
    if c.checkpointing:
        return checkpointed_activation_bytes(spec, layout, batch, tokens)
    return activation_bytes(spec, layout, "fp32", batch, tokens)
