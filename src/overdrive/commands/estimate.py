"""Hugging Face Accelerate's ``estimate-memory`` command as functions: the size of a model's
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

import torch

from overdrive.cli.command_parser import command_parser
from overdrive.memory_estimate.build import load_spec
from overdrive.utils import init_empty_weights

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


def estimate_training_usage(
    bytes: float,  # noqa: A002 (Hugging Face Accelerate's parameter name)
    mixed_precision: str,
    msamp_config: str | None = None,
) -> dict[str, float]:
    """Adam training memory, batch size 1, for a model of ``bytes`` float32 bytes trained in
    ``mixed_precision`` ("float32", "float16", "bfloat16", or "fp8" without an MS-AMP
    config); -1 where it is not estimated (other dtypes, MS-AMP)."""
    usage = {"model": -1.0, "optimizer": -1.0, "gradients": -1.0, "step": -1.0}
    size = float(bytes)
    if mixed_precision == "float32":
        usage.update(model=size, gradients=size, optimizer=size * 2, step=size * 4)
    elif mixed_precision in ("float16", "bfloat16") or (
        mixed_precision == "fp8" and msamp_config is None
    ):
        # fp32 master weights and fp16 gradients next to fp32 ones; Adam's two moments
        usage.update(model=size, gradients=size + size // 2, optimizer=size * 2, step=size * 2)
    return usage


def check_has_model(error: BaseException) -> str:
    """Which library ``error`` says has no such model: "timm", "transformers" or "unknown"."""
    import importlib.util

    message = str(error)
    timm_says = (
        (isinstance(error, RuntimeError) and "Unknown model" in message)
        or type(error).__name__ == "EntryNotFoundError"
        or (isinstance(error, KeyError) and "architecture" in message)
    )
    if timm_says and importlib.util.find_spec("timm") is not None:
        return "timm"
    transformers_says = isinstance(error, (OSError, ValueError)) and (
        "does not appear to have a file named" in message or "Unrecognized model in" in message
    )
    if transformers_says and importlib.util.find_spec("transformers") is not None:
        return "transformers"
    return "unknown"


def create_empty_model(
    model_name: str,
    library_name: str | None,
    trust_remote_code: bool = False,
    access_token: str | None = None,
) -> Any:
    """The model ``model_name`` (a Hub repo id or a local directory) built in float32 on the
    meta device from its config, with ``transformers`` or ``timm`` (``library_name``, else
    the repo's Hub metadata): nothing but the config is downloaded."""
    info: Any = None
    if not os.path.exists(model_name):
        info = verify_on_hub(model_name, access_token)
        if info in ("gated", "repo"):
            what = "is gated" if info == "gated" else "does not exist on the Hub"
            raise OSError(
                f"Repo for model `{model_name}` {what}. Authenticate with `hf auth login` (or "
                "set HF_TOKEN) with an account that has access."
            )
    library_name = library_name or getattr(info, "library_name", None)
    if library_name == "transformers":
        import transformers

        print(f"Loading pretrained config for `{model_name}` from `transformers`...")
        config = transformers.AutoConfig.from_pretrained(
            model_name, trust_remote_code=trust_remote_code, token=access_token
        )
        auto_map = getattr(config, "auto_map", None) or {}
        name = next((k for k in auto_map if k.startswith("AutoModelFor")), "AutoModel")
        with init_empty_weights():
            return getattr(transformers, name).from_config(
                config, torch_dtype=torch.float32, trust_remote_code=trust_remote_code
            )
    if library_name == "timm":
        import timm

        print(f"Loading pretrained config for `{model_name}` from `timm`...")
        with init_empty_weights():
            return timm.create_model(add_timm_hub_prefix(model_name), pretrained=False)
    if not library_name:
        raise ValueError(
            f"Model `{model_name}` does not have any library metadata on the Hub; pass "
            "--library_name (transformers or timm)"
        )
    raise ValueError(f"Library `{library_name}` is not supported: use transformers or timm")


def create_ascii_table(headers: list[str], rows: list[list[str]], title: str) -> str:
    """``rows`` under ``headers`` and ``title`` as a box-drawn text table, each cell centred;
    the last column widens when the title is wider than the columns."""
    widths = [
        max(len(str(c)) for c in [h, *(row[i] for row in rows)]) for i, h in enumerate(headers)
    ]
    inner = sum(widths) + len(widths) - 1
    if len(title) > inner:
        widths[-1] += len(title) - inner
        inner = len(title)

    def line(left: str, middle: str, right: str) -> str:
        return left + middle.join("─" * w for w in widths) + right

    def cells(values: list[str]) -> str:
        return "│" + "│".join(str(v).center(w) for v, w in zip(values, widths, strict=True)) + "│"

    out = ["┌" + "─" * inner + "┐", "│" + title.center(inner) + "│", line("├", "┬", "┤")]
    out += [cells(headers), line("├", "┼", "┤")]
    out += [cells(row) for row in rows]
    out.append(line("└", "┴", "┘"))
    return "\n".join(out)


def gather_data(args: argparse.Namespace) -> list[list[Any]]:
    """Per dtype: [dtype, largest layer bytes, total bytes, training usage dict]."""
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
    """The ``estimate-memory`` arguments of Hugging Face Accelerate."""
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
    rows = []
    for dtype, largest, total, usage in gather_data(args):
        peak = max(usage.values())
        training = _readable(peak) if peak != -1 else "N/A"
        rows.append([dtype, _readable(largest), _readable(total), training])
    headers = ["dtype", "Largest Layer", "Total Size", "Training using Adam"]
    print(create_ascii_table(headers, rows, f"Memory Usage for loading `{args.model_name}`"))


def main() -> None:
    """``python -m overdrive.commands.estimate MODEL [--dtypes ...]``."""
    estimate_command(estimate_command_parser().parse_args())


if __name__ == "__main__":
    main()
