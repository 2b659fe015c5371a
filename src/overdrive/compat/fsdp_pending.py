"""FSDP file helpers Trainer imports but overdrive has not built yet: each says so when called."""

from __future__ import annotations

from typing import Any

from overdrive.errors import OverdriveError


def _pending(name: str) -> OverdriveError:
    return OverdriveError(
        f"{name} is not available in overdrive yet (issue 17). Fix: save and resume with "
        "accelerator.save_state / load_state, or Trainer's default (non-FSDP) checkpoints."
    )


def load_fsdp_model(*args: Any, **kwargs: Any) -> None:
    """Not built yet."""
    raise _pending("load_fsdp_model")


def save_fsdp_optimizer(*args: Any, **kwargs: Any) -> None:
    """Not built yet."""
    raise _pending("save_fsdp_optimizer")


def load_fsdp_optimizer(*args: Any, **kwargs: Any) -> None:
    """Not built yet."""
    raise _pending("load_fsdp_optimizer")
