"""`overdrive env`: what to paste into a bug report."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import Any

from overdrive.alias import engine_line
from overdrive.cli.flags import add_flag
from overdrive.config import load_settings
from overdrive.config.sources import config_in_use, not_a_file
from overdrive.errors import ConfigError
from overdrive.version import __version__

OPTIONAL_BACKENDS = ("deepspeed", "tensorboard", "mlflow", "wandb", "transformers", "torchao")


def register(commands: Any) -> None:
    """Add the ``env`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "env", help="print versions, GPUs and the config in use (for bug reports)"
    )
    add_flag(parser, "config_file", default=None, help="config file to show (default: cached)")
    parser.set_defaults(handler=handle)


def backend_versions() -> dict[str, str | None]:
    """Installed optional packages and their versions; found without importing them."""
    found: dict[str, str | None] = {}
    for name in OPTIONAL_BACKENDS:
        if importlib.util.find_spec(name) is None:
            found[name] = None
            continue
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "installed"
    return found


def _torch_lines() -> list[str]:
    import torch
    import torch.distributed as dist

    lines = [f"torch: {torch.__version__}"]
    cuda = torch.version.cuda or "none (CPU build)"
    lines.append(f"CUDA (torch built with): {cuda}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    lines.append(f"GPUs visible: {count}")
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        memory = props.total_memory / 2**30
        lines.append(f"  {index}: {props.name}, {memory:.1f} GiB")
    backends = [
        name
        for name, ok in (
            ("gloo", dist.is_available() and dist.is_gloo_available()),
            ("nccl", dist.is_available() and dist.is_nccl_available()),
            ("mpi", dist.is_available() and dist.is_mpi_available()),
        )
        if ok
    ]
    lines.append(f"process-group backends: {', '.join(backends) or 'none'}")
    return lines


def _config_lines(config_file: str | None) -> list[str]:
    path = Path(config_file) if config_file else config_in_use(os.environ)
    how = "given" if config_file else "default"
    if not path.is_file():
        if config_file:  # `launch --config_file` with this path stops with this error
            return [f"config file ({how}): {path}", *str(not_a_file(path)).splitlines()]
        return [f"config file ({how}): {path} (not present; defaults apply)"]
    lines = [f"config file ({how}): {path}", "--- contents ---"]
    try:
        lines.append(path.read_text(encoding="utf-8").rstrip("\n"))
    except (OSError, UnicodeDecodeError) as exc:
        lines.append(f"(cannot read: {exc})")
    lines.append("--- end ---")
    return lines


def extension_dir() -> Path:
    """Where torch keeps C++ extensions compiled on first use (DeepSpeed's JIT ops)."""
    import torch

    given = os.environ.get("TORCH_EXTENSIONS_DIR")
    if given:
        return Path(given)
    build = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "torch_extensions" / f"py{sys.version_info[0]}{sys.version_info[1]}_{build}"


def _deepspeed_lines() -> list[str]:
    """DeepSpeed's version, its accelerator and which of its C++ ops are compiled."""
    if importlib.util.find_spec("deepspeed") is None:
        return []
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import installed_ops
    except Exception as exc:  # a broken install is what this report is for
        return [f"DeepSpeed: cannot be imported ({type(exc).__name__}: {exc})"]
    built = sorted(name for name, ok in installed_ops.items() if ok)
    cache = extension_dir()
    jit = sorted(
        d.name for d in cache.iterdir() if d.is_dir() and any(d.glob("*.so"))
    ) if cache.is_dir() else []  # fmt: skip
    return [
        f"DeepSpeed: {deepspeed.__version__} (accelerator: {get_accelerator().device_name()})",
        f"  ops compiled at install: {', '.join(built) or 'none'}",
        f"  ops compiled on first use ({cache}): {', '.join(jit) or 'none yet'}",
    ]


def _engine(config_file: str | None) -> str:
    """The engine line for this environment and config file, naming where ``as_accelerate``
    came from; without the file's word where the file cannot be read (shown below)."""

    try:
        settings = load_settings(config_file=config_file, flags={})
    except ConfigError:
        return engine_line()
    asked = settings["as_accelerate"]
    return engine_line(str(settings.source("as_accelerate")) if asked else None)


def report(config_file: str | None = None) -> str:
    """The full report as text."""

    lines = [
        f"overdrive: {__version__}",
        f"Python: {platform.python_version()} ({sys.executable})",
        f"platform: {platform.platform()}",
        *_torch_lines(),
        "optional backends:",
    ]
    for name, version in backend_versions().items():
        lines.append(f"  {name}: {version or 'not installed'}")
    lines += _deepspeed_lines()
    lines.append(f"under overdrive launch / python -m overdrive.run: {_engine(config_file)}")
    lines += _config_lines(config_file)
    relevant = sorted(k for k in os.environ if k.startswith(("ACCELERATE_", "OVERDRIVE_")))
    lines.append("environment: " + (", ".join(relevant) if relevant else "no ACCELERATE_* set"))
    return "\n".join(lines)


def handle(args: argparse.Namespace) -> int:
    print(report(args.config_file))
    return 0
