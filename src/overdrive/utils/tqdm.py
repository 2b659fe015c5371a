"""A progress bar shown on each machine's main process only."""

from __future__ import annotations

import os
from typing import Any

from overdrive.environment.process_env import detect_process_env


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(*args, **kwargs)``, disabled on processes other than each machine's
    main one when ``main_process_only`` (the default)."""
    try:
        from tqdm.auto import tqdm as _tqdm
    except ImportError:
        raise ImportError("overdrive.utils.tqdm needs the tqdm package: pip install tqdm") from None
    if args and isinstance(args[0], bool):
        raise TypeError(
            "tqdm's first positional argument is the iterable; pass main_process_only= by name"
        )
    if main_process_only and not kwargs.get("disable", False):
        kwargs["disable"] = detect_process_env(os.environ).local_rank != 0
    return _tqdm(*args, **kwargs)
