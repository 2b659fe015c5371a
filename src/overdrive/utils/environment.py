"""Environment helpers the described system's users import from ``accelerate.utils``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set environment variables (names upper-cased) inside the block, then restore them."""
    saved: dict[str, str | None] = {}
    for key, value in kwargs.items():
        name = key.upper()
        saved[name] = os.environ.get(name)
        os.environ[name] = str(value)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def write_basic_config(
    mixed_precision: str = "no",
    save_location: str | Path | None = None,
    use_xpu: bool = False,
) -> Path | bool:
    """Write a default config file for this machine (like ``overdrive config default``).

    Returns the path written, or False when a file already exists there (it is kept).
    ``save_location`` defaults to the file ``overdrive launch`` reads.
    """
    from overdrive.cli.config_cmd import _gpu_count, _write, default_answers
    from overdrive.config.sources import default_config_path
    from overdrive.errors import ConfigError

    if use_xpu:
        raise ConfigError(
            "write_basic_config(use_xpu=True): overdrive runs on CPUs and CUDA GPUs only",
            key="use_xpu",
            fix="drop use_xpu",
        )
    choices = ("no", "fp16", "bf16", "fp8")
    if str(mixed_precision).lower() not in choices:
        raise ConfigError(
            f"write_basic_config(mixed_precision={mixed_precision!r}) is not one of {choices}",
            key="mixed_precision",
            fix=f"use one of {list(choices)}",
        )
    path = Path(save_location) if save_location else default_config_path(os.environ)
    if path.exists():
        return False
    _write(path, default_answers(_gpu_count(), str(mixed_precision).lower()))
    return path
