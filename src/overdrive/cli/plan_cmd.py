"""``overdrive plan --model CONFIG --gpus N --gpu_memory 80GiB [--seq_len L --batch B]``: a
layout (FSDP2 with HSDP replicas, tp, pp and activation checkpointing, or DeepSpeed ZeRO)
chosen by arithmetic and simulation, written as an Accelerate config file
(``overdrive.simulate.plan``; docs/simulate.md).

Torch-free: the CLI imports it on every start; the planner is imported when asked for.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from overdrive.cli.flags import add_flag, positive_int
from overdrive.errors import ConfigError


def register(commands: Any) -> None:
    """Add the ``plan`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "plan",
        help="choose a training layout for a model on N GPUs by simulation, and write it as "
        "a config file",
        description="Enumerate layouts of --gpus (FSDP2 with HSDP replicas, tensor and "
        "pipeline parallelism, activation checkpointing; CPU offload and context parallelism "
        "by arithmetic only; DeepSpeed ZeRO 1-3), rule out those whose training state alone "
        "exceeds --gpu_memory, simulate the rest as rank 0 for one step with memory sized for "
        "a CUDA GPU (at most --max_simulated, fewest bytes sent first), rank those that fit "
        "by the bytes a rank sends per step (or the step time --cost estimates) and write the "
        "best as an Accelerate config file that overdrive launch runs (docs/simulate.md).",
        allow_abbrev=False,
    )
    add_flag(parser, "model", required=True, metavar="CONFIG",
             help="a transformers causal LM's config.json, or a directory holding one")  # fmt: skip
    add_flag(parser, "gpus", type=positive_int, required=True, metavar="N",
             help="GPUs in all")  # fmt: skip
    add_flag(parser, "gpu_memory", required=True, metavar="SIZE",
             help="memory of one GPU, such as 80GiB")  # fmt: skip
    add_flag(parser, "gpus_per_machine", type=positive_int, default=8, metavar="N",
             help="GPUs per machine (default 8; tensor parallelism stays inside one)")  # fmt: skip
    add_flag(parser, "seq_len", type=positive_int, default=None, metavar="L",
             help="tokens per sample (default: the model's max_position_embeddings, at "
             "most 4096)")  # fmt: skip
    add_flag(parser, "batch", type=positive_int, default=1, metavar="B",
             help="samples per GPU per step (default 1)")  # fmt: skip
    add_flag(parser, "cost", metavar="FILE",
             help="rank by the step time this cost file gives (see --simulate_cost)")  # fmt: skip
    add_flag(parser, "max_simulated", type=positive_int, default=6, metavar="N",
             help="simulate at most N candidates (default 6)")  # fmt: skip
    add_flag(parser, "main_process_ip", metavar="IP",
             help="written into the file when it spans several machines")  # fmt: skip
    add_flag(parser, "output", default="plan_config.yaml", metavar="FILE",
             help="the config file to write (default plan_config.yaml)")  # fmt: skip
    parser.set_defaults(handler=handle)


def _seq_len(model: str, asked: int | None) -> tuple[int, str]:
    if asked is not None:
        return asked, "--seq_len"
    from transformers import AutoConfig

    longest = getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", None)
    if not longest:
        return 2048, "a default (the model names no max_position_embeddings)"
    return min(int(longest), 4096), "the model's max_position_embeddings (at most 4096)"


def handle(args: argparse.Namespace) -> int:
    """Plan, print each candidate, write the chosen one; exit 0, or 2 when none fits."""
    # deferred: the planner loads torch and transformers
    from overdrive.simulate.plan import config_text, parse_memory, plan_layout
    from overdrive.simulate.report import size  # deferred: as above

    memory = parse_memory(args.gpu_memory)
    seq_len, source = _seq_len(args.model, args.seq_len)
    print(f"overdrive plan: {args.gpus} GPUs of {size(memory)}, {args.batch} x {seq_len} "
          f"tokens per GPU (sequence length from {source}), fp32 weights and AdamW")  # fmt: skip
    print("memory sized for a CUDA GPU (--simulate_device cuda): a candidate fits when the "
          "reserved peak of PyTorch's caching allocator in its simulated step is within "
          "--gpu_memory; 'est.' figures are arithmetic")  # fmt: skip
    found, layer = plan_layout(
        args.model,
        args.gpus,
        memory,
        seq_len=seq_len,
        batch=args.batch,
        per_machine=args.gpus_per_machine,
        cost_path=args.cost,
        max_simulated=args.max_simulated,
    )
    for candidate in found:
        parts = [f"state on the GPU {size(candidate.state_bytes)}"]
        if candidate.activation_bytes is not None:
            parts.append(f"est. activations {size(candidate.activation_bytes)}")
        parts.append(f"est. sends {size(int(candidate.comm_bytes))}/step")
        if candidate.reserved_bytes is not None:
            parts.append(f"simulated reserved peak {size(candidate.reserved_bytes)}")
        if candidate.peak_bytes is not None:
            parts.append(f"allocated peak {size(candidate.peak_bytes)}")
            parts.append(f"sends {size(int(candidate.sent_bytes or 0))}/step")
        if candidate.step_s is not None:
            parts.append(f"step {candidate.step_s:.4g} s")
        print(f"  {candidate.name}: {candidate.verdict} ({', '.join(parts)})")
    fitting = [c for c in found if c.verdict == "fits"]
    if not fitting:
        raise ConfigError(
            f"no layout of {args.gpus} GPUs fits {args.model} in {args.gpu_memory} per GPU",
            key="gpus",
            fix="more GPUs, GPUs with more memory, a smaller --batch or --seq_len, "
            "a higher --max_simulated, or one of the candidates listed as not simulated "
            "(CPU offload, context parallelism) tried by hand",
        )
    chosen = fitting[0]
    text = config_text(chosen, args.gpus, args.gpus_per_machine, layer, args.main_process_ip)
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"chosen: {chosen.name}; written to {args.output} (overdrive launch --config_file "
          f"{args.output} train.py)")  # fmt: skip
    if args.gpus > args.gpus_per_machine and not args.main_process_ip:
        print(f"note: {args.output} spans several machines: add main_process_ip (machine 0's "
              "address) before launching")  # fmt: skip
    return 0
