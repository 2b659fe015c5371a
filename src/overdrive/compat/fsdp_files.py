"""The described system's FSDP file helpers: refused, with overdrive's way named.

Its FSDP checkpoints are ``torch.distributed.checkpoint`` folders
(``pytorch_model_fsdp_0``); overdrive writes sharded checkpoints with ``save_state`` (each
process its own safetensors shards, checksummed) and merges them with
``overdrive merge-weights``. The names exist so that imports work; calling them says so.
"""

from __future__ import annotations

from typing import Any

from overdrive.errors import OverdriveError


def save_fsdp_model(*args: Any, **kwargs: Any) -> None:
    """Refused: use ``accelerator.save_state()`` or ``accelerator.save_model()``."""
    raise OverdriveError(
        "save_fsdp_model() writes the described system's torch.distributed.checkpoint "
        "layout, which overdrive does not use\n"
        "  fix: accelerator.save_state(dir) (sharded, resumable) or "
        "accelerator.save_model(model, dir) (full weights); see docs/migrating.md"
    )


def merge_fsdp_weights(*args: Any, **kwargs: Any) -> None:
    """Refused: use ``overdrive merge-weights CHECKPOINT OUT`` on a ``save_state`` folder."""
    raise OverdriveError(
        "merge_fsdp_weights() reads the described system's pytorch_model_fsdp_0 folders, "
        "which overdrive does not write\n"
        "  fix: `overdrive merge-weights <checkpoint dir> <output dir>` (or "
        "overdrive.checkpoint.merge.merge_weights) on a folder written by save_state()"
    )
