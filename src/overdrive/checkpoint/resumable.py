"""Before ``load_state`` reads or says anything: refuse a data position this run cannot
continue (a mid-epoch checkpoint saved with another global batch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from overdrive.checkpoint.serialization import load_tree

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


def continues_mid_epoch(accelerator: CheckpointHost, loader: Any) -> bool:
    """Whether ``load_state`` restores this loader's position (exact_resume, or the loader's
    use_stateful_dataloader); otherwise its next iteration starts a new epoch."""
    return bool(accelerator.exact_resume or getattr(loader, "use_stateful_dataloader", False))


def refuse_unresumable(accelerator: CheckpointHost, path: Path, allow_unsafe_pickle: bool) -> None:
    """Raise the loader's own refusal now, so it comes first and alone: before any part is
    read and before the note about resuming with another number of processes."""
    loaders = [
        (i, loader)
        for i, loader in enumerate(accelerator.prepared.dataloaders)
        if callable(getattr(loader, "check_resume", None))
        and continues_mid_epoch(accelerator, loader)
    ]
    if not loaders:
        return
    own = path / f"rank_{accelerator.state.process_index}"
    state_dir = own if own.is_dir() else path / "rank_0"  # positions agree across processes
    if not state_dir.is_dir():
        return
    state = load_tree(
        state_dir, "state", what="process state", allow_unsafe_pickle=allow_unsafe_pickle
    )
    saved = state.get("dataloaders", []) if isinstance(state, dict) else []
    for i, loader in loaders:
        if i < len(saved) and isinstance(saved[i], dict):
            loader.check_resume(saved[i])
