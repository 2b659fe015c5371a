"""``import accelerate`` answered by overdrive, the way ``python -m cudf.pandas`` answers for pandas.

Explicit and reversible: nothing happens until :func:`install` runs (``overdrive launch`` and
``python -m overdrive.run`` call it), and :func:`uninstall` removes every trace. Where a real
``accelerate`` distribution is installed, the alias refuses unless asked for by name
(``--as_accelerate``, ``OVERDRIVE_AS_ACCELERATE=1`` or ``as_accelerate: true`` in the config file).
"""

from __future__ import annotations

import os
import sys

from overdrive.alias import spawned
from overdrive.alias.finder import AliasFinder, drop_alias_modules
from overdrive.alias.metadata import COMPAT_VERSION, real_distributions
from overdrive.errors import ConfigError

OPT_IN_ENV = "OVERDRIVE_AS_ACCELERATE"

__all__ = [
    "COMPAT_VERSION",
    "OPT_IN_ENV",
    "engine_line",
    "install",
    "is_installed",
    "opted_in",
    "uninstall",
]


def opted_in() -> bool:
    """Whether the user asked for the alias even over a real ``accelerate``."""
    return os.environ.get(OPT_IN_ENV, "").strip().lower() in ("1", "true", "yes")


def is_installed() -> bool:
    """Whether the alias finder is on ``sys.meta_path``."""
    return any(isinstance(f, AliasFinder) for f in sys.meta_path)


def real_accelerate() -> str | None:
    """Version of an installed real ``accelerate`` distribution, if any."""
    found = real_distributions()
    return found[0].version if found else None


def install(
    force: bool = False, *, asked_by: str | None = None, started_by: str | None = None
) -> bool:
    """Make ``import accelerate`` give overdrive; returns False (and changes nothing) when a real
    ``accelerate`` is installed and neither ``force`` nor ``OVERDRIVE_AS_ACCELERATE=1`` asks to
    shadow it. ``asked_by``: where as_accelerate was switched on (for the error when the real
    one was imported first); ``started_by``: the command that is running the script, if any."""
    if is_installed():
        return True
    real = real_accelerate()
    if real is not None and not (force or opted_in()):
        return False
    if "accelerate" in sys.modules and real is not None:
        raise _imported_first(real, asked_by, started_by)
    sys.meta_path.insert(0, AliasFinder())
    spawned.hook()  # spawned children (DataLoader workers) import the main script again
    return True


def _imported_first(real: str, asked_by: str | None, started_by: str | None) -> ConfigError:
    """The error for an alias asked for after the real ``accelerate`` was imported."""
    if asked_by is None:
        asked_by = f"env {OPT_IN_ENV}=1" if opted_in() else "install(force=True)"
    where = getattr(sys.modules["accelerate"], "__file__", None) or "an unknown file"
    if started_by is not None:
        fix = (
            f"stop what imports accelerate (or transformers, which imports it) before {started_by} "
            "starts the script (a sitecustomize or usercustomize module, a .pth file, "
            "PYTHONSTARTUP), or run the script with plain python to use the installed accelerate"
        )
    else:
        fix = (
            "call overdrive.alias.install(force=True) before anything imports accelerate or "
            "transformers, or start the script with `python -m overdrive.run --as_accelerate "
            "script.py`"
        )
    return ConfigError(
        f"as_accelerate (from {asked_by}) cannot take effect: the installed accelerate {real} "
        f"was already imported in this process (from {where}), so `import accelerate` keeps "
        "answering with it",
        key="as_accelerate",
        fix=fix,
    )


def uninstall() -> None:
    """Remove the alias: the finder, its metadata answer, and every ``accelerate`` module entry."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, AliasFinder)]
    spawned.unhook()
    drop_alias_modules()


def engine_line(asked_by: str | None = None) -> str:
    """One line saying which engine ``import accelerate`` gets here.

    ``asked_by`` is where ``as_accelerate`` was switched on, as provenance writes it (``flag
    --as_accelerate``, ``file cfg.yaml:3``, ``env OVERDRIVE_AS_ACCELERATE``); None: not asked,
    unless the environment variable is set here.
    """
    real = real_accelerate()
    if real is None:
        return f"`import accelerate` -> overdrive (answering as accelerate {COMPAT_VERSION}; no accelerate installed)"
    if asked_by is None and opted_in():
        asked_by = f"env {OPT_IN_ENV}"
    if asked_by is not None:
        return f"`import accelerate` -> overdrive (shadows installed accelerate {real}; as_accelerate from {asked_by})"
    return (
        f"`import accelerate` -> the installed accelerate {real} (to use overdrive: pass "
        f"--as_accelerate to overdrive launch or python -m overdrive.run, set {OPT_IN_ENV}=1, or "
        "write `as_accelerate: true` in the config file)"
    )
