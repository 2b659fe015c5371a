"""``merge_command_parser`` / ``merge_command``: Hugging Face Accelerate's merge-weights command
as functions (its test scripts call them), backed by ``overdrive.checkpoint.merge``."""

from __future__ import annotations

import argparse
from typing import Any

from overdrive.cli.command_parser import command_parser

description = (
    "Merge a sharded model (a save_fsdp_model folder or a save_state checkpoint) into full "
    "weights (model.safetensors). Should be used when the sharded state dict was saved "
    "(fsdp_state_dict_type: SHARDED_STATE_DICT) and full weights are wanted."
)


def merge_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``merge-weights`` arguments: CHECKPOINT_DIRECTORY OUTPUT_PATH
    [--unsafe_serialization] [--remove_checkpoint_dir]."""
    parser = command_parser(subparsers, "merge-weights", description, merge_command)
    parser.add_argument("checkpoint_directory", help="the folder holding the shards")
    parser.add_argument("output_path", help="where to write the full weights")
    parser.add_argument(
        "--unsafe_serialization",
        action="store_true",
        help="write pytorch_model.bin (a pickle) instead of model.safetensors",
    )
    parser.add_argument(
        "--remove_checkpoint_dir", action="store_true", help="delete the shards afterwards"
    )
    return parser


def merge_command(args: argparse.Namespace) -> list[str]:
    """Run the merge the parsed ``args`` ask for; returns the written file names."""
    # deferred: keeps overdrive.commands.merge torch-free (checkpoint.fsdp_files loads torch)
    from overdrive.checkpoint.fsdp_files import merge_fsdp_weights

    return merge_fsdp_weights(
        args.checkpoint_directory,
        args.output_path,
        safe_serialization=not args.unsafe_serialization,
        remove_checkpoint_dir=args.remove_checkpoint_dir,
    )


def main() -> None:
    """``python -m overdrive.commands.merge CHECKPOINT_DIRECTORY OUTPUT_PATH``."""
    merge_command(merge_command_parser().parse_args())


if __name__ == "__main__":
    main()
