"""The estimate as a table for people or a JSON document for programs."""

from __future__ import annotations

import textwrap
from typing import Any

from overdrive.memory_estimate.arithmetic import (
    Estimate,
    activation_formula,
    stage_counts,
)
from overdrive.memory_estimate.spec import ModelSpec
from overdrive.parallel.layout import ParallelLayout


def human_bytes(n: int | None) -> str:
    """``1.5 GiB``-style size; ``n/a`` for None."""
    if n is None:
        return "n/a"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def assumptions(
    spec: ModelSpec, layout: ParallelLayout, batch_size: int, seq_len: int
) -> list[str]:
    """What the figures assume, in words (printed under the table and in the JSON)."""
    counts = stage_counts(spec, layout)
    notes = [
        "per rank: the rank holding the most (the pipeline stage with the most parameters, "
        "data-parallel rank 0, which gets the rounded-up share of each tensor's first dim)",
        "optimizer: AdamW, exp_avg + exp_avg_sq in fp32 (8 bytes/parameter), sharded over dp "
        "by ZeRO-1/2/3 and FSDP",
        "fp32: weights and gradients fp32. bf16/fp16 as overdrive runs them: DDP keeps fp32 "
        "weights and gradients (autocast); FSDP keeps fp32 sharded weights and gradients and "
        "gathers the weights in bf16/fp16; DeepSpeed ZeRO keeps weights and gradients in "
        "bf16/fp16 and adds fp32 master weights (4 bytes/parameter, sharded with the optimizer, "
        "counted in optimizer)",
        "ZeRO-3 and FSDP shard the weights at rest; SHARD_GRAD_OP keeps every layer gathered "
        "from its forward to its backward, FULL_SHARD and ZeRO-3 gather about two layers at a "
        "time plus the parameters outside the layers (the working column)",
        "working, DDP: its gradient buckets (a second copy of the gradients unless "
        "gradient_as_bucket_view=True) plus, in bf16/fp16, autocast's cached low-precision "
        "copy of the weights; DeepSpeed's own communication buckets are not counted",
        f"tp={layout.tp}: {spec.tp_plan}",
        f"pp={layout.pp}: the {spec.num_layers} repeated layers"
        + (f" ({spec.layers_name})" if spec.layers_name else "")
        + " split evenly over the stages, parameters before them on the first stage and "
        f"after them on the last; shown: stage {counts.stage} ({counts.layers} "
        f"layer{'' if counts.layers == 1 else 's'})"
        + ("; activations: the stage holding the most" if layout.pp > 1 else ""),
        "total: every column summed (an upper bound of the peak; activations and gradients "
        "are not all alive at once)",
    ]
    if spec.has_transformer_dims:
        notes.append(
            f"activations: {activation_formula()} with s=seq_len={seq_len}, "
            f"b=batch_size={batch_size} (micro-batch per process), h={spec.hidden_size}, "
            f"a={spec.num_heads}, t=tp={layout.tp}, V={spec.vocab_size}, L={spec.num_layers}"
        )
    else:
        notes.append(
            "activations: n/a (the model has no transformers config giving hidden size, "
            "heads and layers)"
        )
    return notes


def table(
    spec: ModelSpec, layout: ParallelLayout, rows: list[Estimate], batch_size: int, seq_len: int
) -> str:
    """The readable report: a header, one table per precision, the assumptions."""
    lines = [
        f"model: {spec.class_name} from {spec.source}: {spec.num_parameters:,} parameters"
        + (f", {spec.num_layers} layers" if spec.num_layers else ""),
        f"layout: {layout.world_size} processes = tp {layout.tp} x pp {layout.pp} x "
        f"dp {layout.dp_size}; bytes per rank, AdamW",
    ]
    head = ("strategy", "params", "grads", "optimizer", "working", "activations", "total")
    for dtype in dict.fromkeys(r.dtype for r in rows):
        body = [
            (
                r.strategy,
                *(
                    human_bytes(v)
                    for v in (r.params, r.grads, r.optimizer, r.working, r.activations, r.total)
                ),
            )
            for r in rows
            if r.dtype == dtype
        ]
        widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
        lines += ["", f"{dtype}:"]
        for row in (head, *body):
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
            lines.append("  " + "  ".join(cells))
    lines += ["", "assumptions:"]
    for note in assumptions(spec, layout, batch_size, seq_len):
        lines += textwrap.wrap(note, 98, initial_indent="  - ", subsequent_indent="    ")
    return "\n".join(lines)


def as_json(
    spec: ModelSpec, layout: ParallelLayout, rows: list[Estimate], batch_size: int, seq_len: int
) -> dict[str, Any]:
    """The same report as plain data (sizes in bytes)."""
    return {
        "model": {
            "source": spec.source,
            "class": spec.class_name,
            "parameters": spec.num_parameters,
            "layers": spec.num_layers,
            "hidden_size": spec.hidden_size,
            "num_attention_heads": spec.num_heads,
            "vocab_size": spec.vocab_size,
        },
        "layout": {
            "num_processes": layout.world_size,
            "tp": layout.tp,
            "pp": layout.pp,
            "dp": layout.dp_size,
        },
        "batch_size": batch_size,
        "seq_len": seq_len,
        "optimizer": "AdamW",
        "estimates": [
            {
                "dtype": r.dtype,
                "strategy": r.strategy,
                "params": r.params,
                "grads": r.grads,
                "optimizer": r.optimizer,
                "master_weights": r.master,
                "working": r.working,
                "activations": r.activations,
                "state": r.state,
                "total": r.total,
            }
            for r in rows
        ],
        "assumptions": assumptions(spec, layout, batch_size, seq_len),
    }
