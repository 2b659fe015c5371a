"""Environment helpers the described system's users import from ``accelerate.utils``."""

from __future__ import annotations

import contextlib
import functools
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


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty ``os.environ``; the previous variables (and only they)
    are back afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


_PURGED_PREFIXES = ("ACCELERATE_", "OVERDRIVE_")
_PURGE_MARK = "_accelerate_is_purged_environment_wrapped"


@contextlib.contextmanager
def _restore_prefixed_variables() -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith(_PURGED_PREFIXES)}
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith(_PURGED_PREFIXES)]:
            if key not in saved:
                del os.environ[key]
        os.environ.update(saved)


def _purging(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _restore_prefixed_variables():
            return func(*args, **kwargs)

    setattr(wrapper, _PURGE_MARK, True)
    return wrapper


def _purge_test_methods(cls: type) -> type:
    for name in dir(cls):
        method = getattr(cls, name)
        if name.startswith("test") and callable(method) and not hasattr(method, _PURGE_MARK):
            setattr(cls, name, _purging(method))
    return cls


def purge_accelerate_environment(func_or_cls: Any) -> Any:
    """Undo the ``ACCELERATE_*`` / ``OVERDRIVE_*`` variables a function (or each ``test*``
    method of a class and its subclasses) sets: after each call they are as they were before.
    """
    if not isinstance(func_or_cls, type):
        return _purging(func_or_cls)
    _purge_test_methods(func_or_cls)
    func_or_cls.__init_subclass__ = classmethod(  # type: ignore[assignment]
        lambda sub, **_: _purge_test_methods(sub)
    )
    return func_or_cls


_FORBIDDEN_ENV_CHARS = (";", "\n", "<", ">", " ")


def convert_dict_to_env_variables(current_env: dict[str, str]) -> list[str]:
    """``["KEY=value\\n", ...]`` for the items that are safe to write to an env file: both
    non-empty and free of ``; < >``, spaces and newlines (others are left out with a warning)."""
    import logging

    lines = []
    for key, value in current_env.items():
        text = key + value
        if key and value and not any(char in text for char in _FORBIDDEN_ENV_CHARS):
            lines.append(f"{key}={value}\n")
        else:
            logging.getLogger(__name__).warning(
                "Skipping %s=%s: it holds forbidden characters or misses a value", key, value
            )
    return lines


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
