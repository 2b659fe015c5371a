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
        "OUTPUT_DIR, model_<i> into OUTPUT_DIR/model_<i>. A pytorch_model_fsdp_<i> folder "
        "that save_fsdp_model() wrote is one model. The model's config.json found in or beside "
        "CHECKPOINT_DIR (save_fsdp_model writes it there) is copied into OUTPUT_DIR, so "
        "transformers' from_pretrained(OUTPUT_DIR) loads the result. Needs no process group.",
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
    add_flag(
        parser,
        "unsafe_serialization",
        action="store_true",
        help="write pytorch_model.bin (a pickle) instead of model.safetensors",
    )
    add_flag(
        parser,
        "remove_checkpoint_dir",
        action="store_true",
        help="delete CHECKPOINT_DIR once the weights are written",
    )
    parser.set_defaults(handler=handle)


def _config_line(checkpoint: Path, output: Path) -> str:
    """Copy the model's config.json beside the weights, or say where one must go."""
    # deferred: keeps overdrive.cli.merge_cmd torch-free
    from overdrive.checkpoint.merge import config_places, copy_model_config

    found = copy_model_config(checkpoint, output)
    if found is not None:
        return f"config.json copied from {found}: from_pretrained({str(output)!r}) loads it"
    places = ", ".join(str(p) for p in config_places(checkpoint))
    return (
        f"note: no config.json in {places}; transformers' from_pretrained({str(output)!r}) "
        f"needs the model's config there: model.config.save_pretrained({str(output)!r})"
    )


def handle(args: argparse.Namespace) -> int:
    import shutil

    # deferred: keeps overdrive.cli.merge_cmd torch-free
    from overdrive.checkpoint.merge import merge_weights

    checkpoint = Path(args.checkpoint_dir)
    done = merge_weights(
        checkpoint, Path(args.output_dir), args.max_shard_size, safe=not args.unsafe_serialization
    )
    for part, directory, files in done:
        print(f"{part}: {directory} ({', '.join(files)})")
    print(_config_line(checkpoint, Path(args.output_dir)))
    if args.remove_checkpoint_dir:
        shutil.rmtree(checkpoint)
        print(f"removed {checkpoint}")
    return 0
