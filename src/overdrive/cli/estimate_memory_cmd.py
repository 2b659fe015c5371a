"""`overdrive estimate-memory`: per-rank training memory of a model under each strategy."""

from __future__ import annotations

import argparse
import json
from typing import Any

from overdrive.cli.flags import add_flag, positive_int
from overdrive.errors import ConfigError
from overdrive.memory_estimate import STRATEGIES, estimate, layout_of, normalize_dtype
from overdrive.memory_estimate.arithmetic import check_layout
from overdrive.memory_estimate.build import load_spec
from overdrive.memory_estimate.render import as_json, table
from overdrive.memory_estimate.spec import ModelSpec

DEFAULT_SEQ_LEN = 2048  # the activation figure's sequence length where the model names none


def register(commands: Any) -> None:
    """Add the ``estimate-memory`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "estimate-memory",
        help="per-rank memory for training a model under DDP, ZeRO/FSDP and tp/pp/dp",
        description="Build MODEL on the meta device (nothing downloaded or allocated) and print, "
        "per rank, the bytes of parameters, gradients, AdamW state, working buffers and a rough "
        "activation figure under DDP, DeepSpeed ZeRO-1/2/3 and FSDP SHARD_GRAD_OP/FULL_SHARD, "
        "for the process layout and precisions asked. MODEL is a transformers config.json "
        "(or a directory holding one), module:Class or path/to/file.py:Class (an nn.Module "
        "constructed with no arguments), or a timm model name with --library_name timm.",
        allow_abbrev=False,
    )
    parser.add_argument("model", metavar="MODEL", help="config.json, directory, or module:Class")
    add_flag(
        parser,
        "library_name",
        choices=("transformers", "timm"),
        default=None,
        help="how to read MODEL (default: a file is a transformers config, A:B is module:Class)",
    )
    add_flag(
        parser,
        "dtypes",
        nargs="+",
        default=["fp32", "bf16"],
        metavar="DTYPE",
        help="training precisions: fp32 bf16 fp16 (or float32 bfloat16 float16; default fp32 bf16)",
    )
    add_flag(
        parser,
        "trust_remote_code",
        action="store_true",
        help="let transformers run the config's own model code (auto_map)",
    )
    add_flag(parser, "num_processes", type=positive_int, default=1, help="world size (default 1)")
    add_flag(parser, "tp", type=positive_int, default=1, help="tensor-parallel degree (default 1)")
    add_flag(
        parser, "pp", type=positive_int, default=1, help="pipeline-parallel degree (default 1)"
    )
    add_flag(
        parser,
        "batch_size",
        type=positive_int,
        default=1,
        help="micro-batch per process, for the activation figure (default 1)",
    )
    add_flag(
        parser,
        "seq_len",
        type=positive_int,
        default=None,
        help="sequence length, for the activation figure (default: the model's "
        f"max_position_embeddings; {DEFAULT_SEQ_LEN} where the model names none)",
    )
    add_flag(
        parser,
        "strategies",
        nargs="+",
        default=None,
        metavar="NAME",
        help="only these rows: DDP ZeRO-1 ZeRO-2 ZeRO-3 SHARD_GRAD_OP FULL_SHARD (default all)",
    )
    add_flag(parser, "json", action="store_true", help="print JSON (sizes in bytes)")
    parser.set_defaults(handler=handle)


def _strategies(names: list[str] | None) -> list[Any]:
    if not names:
        return list(STRATEGIES)
    by_name = {s.name.lower(): s for s in STRATEGIES}
    by_name |= {s.name.split()[-1].lower(): s for s in STRATEGIES}
    chosen = []
    for name in names:
        strategy = by_name.get(name.lower())
        if strategy is None:
            raise ConfigError(
                f"--strategies {name}: no such strategy",
                key="strategies",
                fix="choose from DDP ZeRO-1 ZeRO-2 ZeRO-3 SHARD_GRAD_OP FULL_SHARD",
            )
        chosen.append(strategy)
    return list(dict.fromkeys(chosen))


def handle(args: argparse.Namespace) -> int:
    dtypes = list(dict.fromkeys(normalize_dtype(d) for d in args.dtypes))
    strategies = _strategies(args.strategies)
    spec = load_spec(
        args.model, library_name=args.library_name, trust_remote_code=args.trust_remote_code
    )
    layout = layout_of(args.num_processes, args.tp, args.pp)
    check_layout(spec, layout)
    seq_len, seq_source = sequence_length(args.seq_len, spec)
    rows = [
        estimate(spec, layout, dtype, s, batch_size=args.batch_size, seq_len=seq_len)
        for dtype in dtypes
        for s in strategies
    ]
    if args.json:
        report = as_json(spec, layout, rows, args.batch_size, seq_len)
        print(json.dumps(dict(report, seq_len_source=seq_source), indent=2))
    else:
        print(table(spec, layout, rows, args.batch_size, seq_len))
        print(f"sequence length {seq_len}: {seq_source}")
    return 0


def sequence_length(given: int | None, spec: ModelSpec) -> tuple[int, str]:
    """The sequence length the activation figure uses, and where it came from."""
    if given is not None:
        return given, "--seq_len"
    if spec.max_positions:
        return spec.max_positions, "the model's max_position_embeddings (--seq_len to change)"
    return DEFAULT_SEQ_LEN, "a default: the model names no maximum length (--seq_len to change)"
