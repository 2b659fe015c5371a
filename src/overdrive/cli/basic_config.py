"""Hugging Face Accelerate's ``write_basic_config`` (the faces ``overdrive/utils/environment.py``
and ``overdrive/utils/other.py`` re-export it): a default config file for this machine, as
``overdrive config default`` writes it."""

from __future__ import annotations

import os
from pathlib import Path

from overdrive.errors import ConfigError


def write_basic_config(
    mixed_precision: str = "no",
    save_location: str | Path | None = None,
    use_xpu: bool = False,
) -> Path | bool:
    """Write a default config file for this machine (like ``overdrive config default``).

    Returns the path written, or False when a file already exists there (it is kept).
    ``save_location`` defaults to the file ``overdrive launch`` reads.
    """
    # deferred: keeps overdrive.utils light and torch-free (cli.config_cmd loads config/, yaml)
    from overdrive.cli.config_cmd import _gpu_count, _write, default_answers

    # deferred: keeps overdrive.utils light and torch-free (config/ loads yaml)
    from overdrive.config.sources import default_config_path

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
