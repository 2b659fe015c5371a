"""Write an object once per job (or per machine), atomically: the work behind Hugging Face
Accelerate's ``accelerate.utils.save`` (the face ``overdrive/utils/other.py``)."""

from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path
from typing import Any

import torch

from overdrive.bigmodel.tensor_files import replace_atomically, untied_tensors
from overdrive.errors import ConfigError
from overdrive.processes.process_state import current_partial_state


def without_shared_storage(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each tied group kept once, as safetensors requires
    (``untied_tensors``), with a warning naming the names left out."""
    kept, ties = untied_tensors(state)
    if ties:
        removed = [f"{name} (shares {first})" for name, first in ties.items()]
        logging.getLogger(__name__).warning(
            f"Removed shared tensor {removed} while saving. This should be OK, but check by "
            "verifying that you don't receive any warning while reloading"
        )
    return kept


def write_once(obj: Any, f: str | os.PathLike[str], safe_serialization: bool = False) -> None:
    """Write ``obj`` to ``f``: safetensors for a dict of tensors with ``safe_serialization``,
    else ``torch.save``; the file appears whole or not at all."""
    if safe_serialization:
        from safetensors.torch import save_file

        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise ConfigError(
                "save(..., safe_serialization=True) needs a dict of tensors",
                key="safe_serialization",
                fix="pass a state dict, or safe_serialization=False for other objects",
            )
        tensors = without_shared_storage(obj)
        replace_atomically(
            Path(f), lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"})
        )
    else:
        replace_atomically(Path(f), partial(torch.save, obj))


def save(
    obj: Any,
    f: str | os.PathLike[str],
    save_on_each_node: bool = False,
    safe_serialization: bool = False,
) -> None:
    """Save ``obj`` from the main process (each machine's with ``save_on_each_node``)."""
    state = current_partial_state()
    writer = state.is_local_main_process if save_on_each_node else state.is_main_process
    if writer:
        write_once(obj, f, safe_serialization)
