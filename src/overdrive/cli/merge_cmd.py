"""`overdrive merge-weights`: a checkpoint's model weights as full safetensors files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from overdrive.cli.flags import add_flag


def register(commands: Any) -> None:
    """Add the ``merge-weights`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "merge-weights",
        help="write a checkpoint's model weights as full safetensors files (merging shards)",
        description="Read a checkpoint that save_state() wrote (sharded over processes or not) "
        "and write each model's full weights in the Hugging Face layout: model_0 into "
        "OUTPUT_DIR, model_<i> into OUTPUT_DIR/model_<i>. Needs no process group.",
        allow_abbrev=False,
    )
    parser.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR", help="checkpoint directory")
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="where to write the weights")
    add_flag(
        parser,
        "max_shard_size",
        default="10GB",
        help="largest weight file before splitting, e.g. 5GB or 500MiB (default 10GB)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from overdrive.checkpoint.merge import merge_weights

    done = merge_weights(Path(args.checkpoint_dir), Path(args.output_dir), args.max_shard_size)
    for part, directory, files in done:
        print(f"{part}: {directory} ({', '.join(files)})")
    return 0
