"""The described system's ``estimate-memory`` command as functions: the size of a model's
largest layer and of the whole model per dtype, and Adam training memory, from a model built
on the meta device (``overdrive estimate-memory`` gives the per-strategy, per-rank figures).

MODEL is a Hub repo id (its ``config.json`` is fetched; nothing else is downloaded), a local
``config.json`` or directory, or anything ``overdrive estimate-memory`` reads.
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from typing import Any

from overdrive.commands.parser import command_parser

DTYPE_DIVISORS = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}


def verify_on_hub(repo: str, token: str | None = None) -> Any:
    """The repo's Hub info, ``"gated"`` for a gated (or unreachable) repo, ``"repo"`` for none."""
    from huggingface_hub import model_info
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

    try:
        return model_info(repo, token=token)
    except RepositoryNotFoundError:
        return "repo"
    except (OSError, GatedRepoError):
        return "gated"


def add_timm_hub_prefix(model_name: str) -> str:
    """``timm/resnet50.a1_in1k`` -> ``hf-hub:timm/resnet50.a1_in1k`` (what ``timm`` needs for a
    Hub id); bare architecture names and names with a source prefix stay as they are."""
    if ":" in model_name or "/" not in model_name:
        return model_name
    return f"hf-hub:{model_name}"


def _local_or_hub(args: argparse.Namespace) -> str:
    """A path ``load_spec`` reads: the name itself, or the Hub repo's downloaded config."""
    name = args.model_name
    if os.path.exists(name) or ":" in name or args.library_name == "timm":
        return add_timm_hub_prefix(name) if args.library_name == "timm" else name
    info = verify_on_hub(name, os.environ.get("HF_TOKEN"))
    if info == "gated":
        raise OSError(
            f"Repo for model `{name}` is gated. You must be authenticated to access it: run "
            "`hf auth login` (or set HF_TOKEN) with an account that has access."
        )
    if info == "repo":
        raise OSError(
            f"Repo for model `{name}` does not exist on the Hub. For a private repo, "
            "authenticate with `hf auth login` (or set HF_TOKEN)."
        )
    from huggingface_hub import hf_hub_download

    return str(hf_hub_download(name, "config.json"))


def _sizes(spec: Any) -> tuple[int, int]:
    """(total bytes, bytes of the largest layer) in float32; a repeated block is one layer,
    a tensor outside the blocks belongs to its module."""
    groups: dict[Any, int] = defaultdict(int)
    for tensor in spec.tensors:
        group = tensor.layer if tensor.layer is not None else tensor.name.rsplit(".", 1)[0]
        groups[group] += tensor.numel * 4
    total = sum(groups.values())
    return total, max(groups.values(), default=0)


def estimate_training_usage(size: float, dtype: str) -> dict[str, float]:
    """Adam training memory for a model of ``size`` float32 bytes, batch size 1 (-1: not
    estimated for that dtype)."""
    usage = {"model": -1.0, "optimizer": -1.0, "gradients": -1.0, "step": -1.0}
    if dtype == "float32":
        usage.update(model=size, gradients=size, optimizer=size * 2, step=size * 4)
    elif dtype in ("float16", "bfloat16"):
        usage.update(model=size, gradients=size * 1.5, optimizer=size * 2, step=size * 2)
    return usage


def gather_data(args: argparse.Namespace) -> list[list[Any]]:
    """Per dtype: [dtype, largest layer bytes, total bytes, training usage dict]."""
    from overdrive.memory_estimate.build import load_spec

    spec = load_spec(
        _local_or_hub(args),
        library_name=args.library_name,
        trust_remote_code=args.trust_remote_code,
    )
    total, largest = _sizes(spec)
    return [
        [
            dtype,
            largest / DTYPE_DIVISORS[dtype],
            total / DTYPE_DIVISORS[dtype],
            estimate_training_usage(total, dtype),
        ]
        for dtype in args.dtypes
    ]


def estimate_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``estimate-memory`` arguments of the described system."""
    description = "Model size estimator for fitting a model into device memory."
    parser = command_parser(subparsers, "estimate-memory", description, estimate_command)
    parser.add_argument("model_name", help="a Hub repo id, or a local config.json / directory")
    parser.add_argument("--library_name", choices=["timm", "transformers"], default=None)
    parser.add_argument(
        "--dtypes", nargs="+", default=list(DTYPE_DIVISORS), choices=list(DTYPE_DIVISORS)
    )
    parser.add_argument("--trust_remote_code", action="store_true", default=False)
    return parser


def _readable(size: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{size:.2f} {unit}" if unit != "bytes" else f"{int(size)} bytes"
        size /= 1024
    return str(size)


def estimate_command(args: argparse.Namespace) -> None:
    """Print the table: dtype, largest layer, total size, training with Adam."""
    rows = gather_data(args)
    print(f"Memory usage for loading `{args.model_name}`")
    print(f"{'dtype':<10}{'Largest Layer':>16}{'Total Size':>16}{'Training using Adam':>22}")
    for dtype, largest, total, usage in rows:
        peak = max(usage.values())
        training = _readable(peak) if peak != -1 else "N/A"
        print(f"{dtype:<10}{_readable(largest):>16}{_readable(total):>16}{training:>22}")
