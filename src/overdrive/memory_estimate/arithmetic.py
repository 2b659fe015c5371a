"""Bytes per rank for parameters, gradients, optimizer state, working buffers, activations.

Plain arithmetic over a ModelSpec (no torch). Each figure is for the rank that holds the most:
the pipeline stage with the most parameters, and on it the data-parallel rank 0, which gets
the rounded-up share of every tensor's first dimension (as FSDP2's ``torch.chunk`` split does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from overdrive.errors import ConfigError
from overdrive.memory_estimate.spec import ModelSpec, TensorSpec
from overdrive.parallel.layout import ParallelLayout

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "no": "fp32"}
ADAMW_STATE_BYTES = 8
"""AdamW's exp_avg and exp_avg_sq, fp32 each, per parameter."""
MASTER_BYTES = 4


def normalize_dtype(name: str) -> str:
    """``fp32``/``bf16``/``fp16`` from either spelling (``float32`` ... as Hugging Face
    Accelerate's ``--dtypes`` writes them); int8/int4 and the rest are an error."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DTYPE_BYTES:
        raise ConfigError(
            f"--dtypes {name}: training memory is estimated for fp32, bf16 and fp16 only "
            "(int8/int4 are weight formats for inference, not training precisions)",
            key="dtypes",
            fix="pass --dtypes fp32 bf16 fp16 (or float32 bfloat16 float16)",
        )
    return key


@dataclass(frozen=True)
class Strategy:
    """How one backend stores the training state, as overdrive runs it."""

    name: str
    backend: str
    """``ddp``, ``deepspeed`` or ``fsdp``."""
    shard_optimizer: bool = False
    shard_grads: bool = False
    shard_params: bool = False
    gathered: str = "none"
    """Parameters gathered for compute: ``none``, ``all`` (kept from forward to backward,
    SHARD_GRAD_OP) or ``unit`` (the non-layer part plus two layers: one computing, one
    prefetched)."""


STRATEGIES = (
    Strategy("DDP", "ddp"),
    Strategy("ZeRO-1", "deepspeed", shard_optimizer=True),
    Strategy("ZeRO-2", "deepspeed", shard_optimizer=True, shard_grads=True),
    Strategy("ZeRO-3", "deepspeed", True, True, True, gathered="unit"),
    Strategy("FSDP SHARD_GRAD_OP", "fsdp", True, True, True, gathered="all"),
    Strategy("FSDP FULL_SHARD", "fsdp", True, True, True, gathered="unit"),
)


@dataclass(frozen=True)
class Estimate:
    """Bytes on the fullest rank for one strategy and precision."""

    strategy: str
    dtype: str
    params: int
    grads: int
    optimizer: int
    """AdamW states plus, where the weights are low precision, fp32 master weights."""
    master: int
    """The master-weight part of ``optimizer``."""
    working: int
    """Gathered or cast parameters and communication buffers (transient or fixed size)."""
    activations: int | None

    @property
    def state(self) -> int:
        """Parameters + gradients + optimizer: what bench/fsdp_memory measures."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        """Upper bound of the peak: every part summed."""
        return self.state + self.working + (self.activations or 0)


def layout_of(num_processes: int = 1, tp: int = 1, pp: int = 1) -> ParallelLayout:
    """The parallel layout of ``num_processes`` = tp x pp x dp (the data-parallel degree is
    what is left); a ConfigError with the fix when the degrees do not factor the processes."""
    for name, value in (("num_processes", num_processes), ("tp", tp), ("pp", pp)):
        if value < 1:
            raise ConfigError(f"--{name} {value} must be 1 or more", key=name, fix=f"--{name} 1")
    group = tp * pp
    if num_processes % group:
        raise ConfigError(
            f"--num_processes {num_processes} is not a multiple of tp x pp = "
            f"{tp} x {pp} = {group} (the data-parallel degree is what is left)",
            key="num_processes",
            fix=f"pass --num_processes as a multiple of {group}, e.g. {group * 2}, "
            "or lower --tp/--pp",
        )
    return ParallelLayout(dp_replicate=num_processes // group, tp=tp, pp=pp)


def check_layout(spec: ModelSpec, layout: ParallelLayout) -> None:
    """The layout's degrees must fit the model; else a ConfigError with the fix."""
    for what, heads in (
        ("attention heads", spec.num_heads),
        ("key/value heads", spec.num_kv_heads),
    ):
        if heads and layout.tp > 1 and heads % layout.tp:
            raise ConfigError(
                f"--tp {layout.tp} does not divide the model's {heads} {what}: each tp rank "
                "must hold whole heads",
                key="tp",
                fix=f"pass a --tp that divides {heads}",
            )
    if layout.pp > 1 and layout.pp > spec.num_layers:
        found = f"{spec.num_layers} repeated layers" if spec.num_layers else "no repeated layers"
        raise ConfigError(
            f"--pp {layout.pp} needs at least {layout.pp} layers to split, the model has {found}",
            key="pp",
            fix=f"pass --pp {max(spec.num_layers, 1)} or less",
        )


def stage_of(tensor: TensorSpec, spec: ModelSpec, pp: int) -> int:
    """Pipeline stage holding ``tensor``: layers split evenly (earlier stages take one more
    when they do not divide), the embedding on the first stage, the rest on the last."""
    if tensor.layer is None:
        return 0 if tensor.before_layers else pp - 1
    base, extra = divmod(spec.num_layers, pp)
    bounds = [(base + 1) * s if s < extra else base * s + extra for s in range(pp + 1)]
    return next(s for s in range(pp) if tensor.layer < bounds[s + 1])


def tp_shape(tensor: TensorSpec, tp: int) -> tuple[int, ...]:
    """The shape one tp rank holds (the split dim rounded up)."""
    if tensor.tp_dim is None or tp == 1:
        return tensor.shape
    shape = list(tensor.shape)
    shape[tensor.tp_dim] = -(-shape[tensor.tp_dim] // tp)
    return tuple(shape)


def shard_numel(shape: tuple[int, ...], n: int) -> int:
    """Elements of the largest of ``n`` dim-0 shards."""
    if not shape or n == 1:
        return math.prod(shape)
    return -(-shape[0] // n) * math.prod(shape[1:])


@dataclass(frozen=True)
class StageCounts:
    """Element counts on the fullest rank of one pipeline stage."""

    stage: int
    full: int
    """Parameters this rank's tp slice holds (what DDP keeps on every rank)."""
    sharded: int
    """Its largest dp shard."""
    outside_layers: int
    largest_layer: int
    layers: int


def stage_counts(spec: ModelSpec, layout: ParallelLayout) -> StageCounts:
    """Counts for the stage with the most parameters."""
    best: StageCounts | None = None
    for stage in range(layout.pp):
        seen: dict[str, TensorSpec] = {}
        for t in spec.tensors:
            if stage_of(t, spec, layout.pp) == stage:
                seen.setdefault(t.key, t)
        per_layer: dict[int, int] = {}
        outside = 0
        for t in seen.values():
            n = math.prod(tp_shape(t, layout.tp))
            if t.layer is None:
                outside += n
            else:
                per_layer[t.layer] = per_layer.get(t.layer, 0) + n
        counts = StageCounts(
            stage=stage,
            full=outside + sum(per_layer.values()),
            sharded=sum(shard_numel(tp_shape(t, layout.tp), layout.dp_size) for t in seen.values()),
            outside_layers=outside,
            largest_layer=max(per_layer.values(), default=0),
            layers=len(per_layer),
        )
        if best is None or counts.full > best.full:
            best = counts
    assert best is not None
    return best


def activation_formula() -> str:
    """The activation formula in words (the docstring of activation_bytes, short)."""
    return (
        "L layers x s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes (16-bit activations, no "
        "recomputation, Korthikanti et al. 2022; x2 for fp32; the 5*a*s/h term is eager "
        "attention's score matrix, which fused attention does not keep) + fp32 logits s*b*V*4; "
        "with pp, 1F1B's first stage holds pp micro-batches of its L/pp layers"
    )


def activation_bytes(
    spec: ModelSpec, layout: ParallelLayout, dtype: str, batch_size: int, seq_len: int
) -> int | None:
    """Rough activations kept for backward on the fullest rank; None without the dims.

    Per layer and micro-batch, for 16-bit activations with no recomputation (Korthikanti et
    al. 2022, tp without sequence parallelism): ``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` bytes;
    fp32 doubles it. The ``5*a*s/h`` term is the eager attention matrix (fused SDPA/flash
    attention does not keep it, so this over-counts there). The first pipeline stage under
    1F1B holds pp micro-batches of its layers; the last adds the fp32 logits ``s*b*V*4``.
    """
    if not spec.has_transformer_dims:
        return None
    s, b, t = seq_len, batch_size, layout.tp
    h, a = spec.hidden_size or 0, spec.num_heads or 0
    per_layer = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    per_layer *= DTYPE_BYTES[dtype] / 2
    base, extra = divmod(spec.num_layers, layout.pp)
    first = (base + (1 if extra else 0)) * per_layer * layout.pp
    last = base * per_layer + s * b * (spec.vocab_size or 0) * 4
    return int(max(first, last) if layout.pp > 1 else first + s * b * (spec.vocab_size or 0) * 4)


def estimate(
    spec: ModelSpec,
    layout: ParallelLayout,
    dtype: str,
    strategy: Strategy,
    *,
    batch_size: int = 1,
    seq_len: int = 2048,
) -> Estimate:
    """Bytes on the fullest rank for ``strategy`` training in ``dtype`` with AdamW.

    fp32: weights, gradients and AdamW's two states in fp32. bf16/fp16 as overdrive runs them:
    DDP keeps fp32 weights and gradients and computes under autocast (which caches a
    low-precision copy of the weights it casts); FSDP keeps fp32 sharded weights and gathers
    them in the low precision; DeepSpeed keeps weights and gradients in the low precision and
    fp32 master weights beside AdamW's states in the optimizer.
    """
    counts = stage_counts(spec, layout)
    mixed = dtype != "fp32"
    low = DTYPE_BYTES[dtype]
    full, sharded = counts.full, counts.sharded
    unit = counts.outside_layers + 2 * counts.largest_layer
    gathered = {"none": 0, "all": full, "unit": min(unit, full)}[strategy.gathered]
    master = 0
    if strategy.backend == "deepspeed":
        weight = low
        master = (sharded if strategy.shard_optimizer else full) * MASTER_BYTES if mixed else 0
        working = gathered * low
    elif strategy.backend == "fsdp":
        weight = 4
        working = gathered * low
    else:
        weight = 4
        # DDP's reducer buckets hold a copy of the gradients (gradient_as_bucket_view=False);
        # autocast's cache holds the weights it cast.
        working = full * 4 + (full * low if mixed else 0)
    states = (sharded if strategy.shard_optimizer else full) * ADAMW_STATE_BYTES
    return Estimate(
        strategy=strategy.name,
        dtype=dtype,
        params=(sharded if strategy.shard_params else full) * weight,
        grads=(sharded if strategy.shard_grads else full) * weight,
        optimizer=states + master,
        master=master,
        working=working,
        activations=activation_bytes(spec, layout, dtype, batch_size, seq_len),
    )
