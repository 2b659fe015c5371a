"""save_state: every rank writes its part into a hidden temp dir; the main process marks and
renames it once all ranks are done, then rotates old automatic checkpoints."""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from overdrive.checkpoint import atomic, layout
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.parts import FORMAT, VERSION, describe, main_parts, require_prepared
from overdrive.checkpoint.serialization import save_tree
from overdrive.checkpoint.sync import Rendezvous


def _fault_point(stage: str) -> None:
    """A seam for tests that kill a process at a given stage of a save; does nothing."""


def target_dir(accelerator: Any, output_dir: str | Path | None) -> tuple[Path, bool]:
    """(final directory, automatically named?) for a save; decided by the main process."""
    if output_dir is not None:
        return Path(output_dir), False
    pc = accelerator.project_configuration
    if not (pc.automatic_checkpoint_naming and pc.project_dir):
        raise CheckpointError(
            "save_state() got no directory, and automatic checkpoint naming is off\n"
            "  fix: pass a directory, save_state('path/to/ckpt'), or set "
            "ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True)"
        )
    root = layout.checkpoints_root(pc.project_dir)
    index = layout.next_index(root, pc.iteration or 0)
    return root / layout.checkpoint_name(index), True


def rank_state(accelerator: Any) -> dict[str, Any]:
    """What differs between ranks: RNG streams, data positions, an open accumulation window."""
    from overdrive.random_state import capture_rng_state

    state: dict[str, Any] = {
        "rng": capture_rng_state(),
        "dataloaders": [dl.state_dict() for dl in accelerator._dataloaders],
    }
    gradient_state = getattr(accelerator, "gradient_state", None)
    if gradient_state is not None:
        state["accumulation"] = gradient_state.state_dict()
        if gradient_state.state_dict().get("micro_batches"):
            # Mid-window: the summed gradients are part of the training state.
            state["grads"] = [
                {
                    name: _local(p.grad)
                    for name, p in accelerator.unwrap_model(m).named_parameters()
                    if p.grad is not None
                }
                for m in accelerator._models
            ]
    return state


def _check_window(accelerator: Any) -> None:
    """Inside an accumulation window the summed gradients are training state; a backend that
    keeps them where they cannot be saved (DeepSpeed's ZeRO buffers) refuses the save."""
    gradient_state = getattr(accelerator, "gradient_state", None)
    strategy = getattr(accelerator, "strategy", None)
    if gradient_state is None or strategy is None or strategy.checkpoints_mid_window:
        return
    if gradient_state.state_dict().get("micro_batches"):
        raise CheckpointError(
            f"save_state() was called inside an accumulation window, after "
            f"{gradient_state.micro_batches} of {gradient_state.num_steps} micro-batches; "
            f"the {strategy.name} backend keeps the summed gradients inside its engine, where "
            "they cannot be saved\n  fix: save when a window closes (when "
            "accelerator.sync_gradients is True, after optimizer.step())"
        )


def _local(tensor: Any) -> Any:
    """This process's part of a sharded (DTensor) gradient; a plain tensor as it is."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _write_main_parts(accelerator: Any, temp: Path, gathered: dict[str, Any]) -> None:
    for part in main_parts(accelerator):
        if part.sharded:
            continue  # every process wrote its own shards
        save_tree(gathered[part.stem], temp, part.stem, what=part.label)
        _fault_point(f"wrote {part.stem}")
    save_tree(accelerator.precision.state_dict(), temp, "precision", what="precision state")


def _gather(accelerator: Any) -> dict[str, Any]:
    """State dicts of the shared parts; called on every rank (a strategy may gather)."""
    strategy = accelerator.strategy
    out: dict[str, Any] = {}
    for part in main_parts(accelerator):
        if part.sharded:
            continue
        if part.kind == "model":
            out[part.stem] = strategy.model_state_dict(accelerator._models[part.index])
        elif part.kind == "optimizer":
            out[part.stem] = strategy.optimizer_state_dict(accelerator._optimizers[part.index])
        else:
            out[part.stem] = part.obj.state_dict()
    return out


def _write_shards(accelerator: Any, temp: Path) -> None:
    """This process's shards of every sharded part (all processes write in parallel)."""
    from overdrive.checkpoint.shards import save_shards

    strategy, rank = accelerator.strategy, accelerator.state.process_index
    for part in main_parts(accelerator):
        if not part.sharded:
            continue
        if part.kind == "model":
            tree = strategy.sharded_model_state_dict(accelerator._models[part.index])
        else:
            tree = strategy.sharded_optimizer_state_dict(accelerator._optimizers[part.index])
        save_shards(tree, temp, part.stem, rank=rank, what=part.label)


def _manifest(accelerator: Any, final: Path) -> dict[str, Any]:
    from overdrive import __version__

    precision_state = accelerator.precision.state_dict()
    return {
        "format": FORMAT,
        "version": VERSION,
        "overdrive_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "name": final.name,
        "world_size": accelerator.state.num_processes,
        "parts": describe(main_parts(accelerator)),
        "dataloaders": len(accelerator._dataloaders),
        "precision": {
            "name": getattr(accelerator.precision, "name", "no"),
            "has_state": bool(precision_state),
        },
    }


def save_state(
    accelerator: Any,
    output_dir: str | Path | None = None,
    *,
    timeout: float | None = None,
    **_: Any,
) -> Path:
    """Save everything needed to resume exactly; collective (call it on every process)."""
    require_prepared(accelerator, "save_state")
    _check_window(accelerator)
    state = accelerator.state
    rank, world = state.process_index, state.num_processes
    rv = Rendezvous("save_state", rank=rank, world_size=world, timeout=timeout or state.timeout)
    rv.arrive()

    def prepare_target() -> str:
        final, automatic = target_dir(accelerator, output_dir)
        atomic.prepare_temp(final)
        return f"{int(automatic)}{final}"

    shared = rv.decide("target", prepare_target)
    automatic, final = shared[0] == "1", Path(shared[1:])
    temp = layout.temp_dir_for(final)

    error: str | None = None
    try:
        gathered = _gather(accelerator)
        _write_shards(accelerator, temp)
        if rank == 0:
            _write_main_parts(accelerator, temp, gathered)
        _fault_point("writing rank files")
        rank_dir = temp / f"rank_{rank}"
        rank_dir.mkdir()
        save_tree(rank_state(accelerator), rank_dir, "state", what=f"process {rank} state")
        _fault_point("wrote rank files")
    except Exception as exc:
        error = "".join(traceback.format_exception_only(exc)).strip()
        if rank != 0:
            rv.done("write", error)
            raise
        rv.share("final", f"could not write its files: {error}", failed=True)
        raise
    others = rv.done("write")
    if rank == 0:
        if others:
            message = "; ".join(others)
            rv.share("final", f"other processes failed: {message}", failed=True)
            raise CheckpointError(f"save_state to {final} failed on {message}")
        try:
            atomic.commit(temp, final, _manifest(accelerator, final))
            if automatic:
                pc = accelerator.project_configuration
                layout.rotate(final.parent, pc.total_limit, keep=final)
        except Exception as exc:
            rv.share("final", f"could not finish the checkpoint: {exc}", failed=True)
            raise
        rv.share("final", str(final))
    else:
        rv.share("final")
    if automatic:
        accelerator.project_configuration.iteration = int(final.name.rsplit("_", 1)[1]) + 1
    return final
