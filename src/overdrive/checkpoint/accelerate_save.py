"""save_state in Hugging Face Accelerate's layout (``checkpoint_format: accelerate``), so a run
can go back: Accelerate 1.15's ``load_state`` reads what this writes, unchanged.

Files, as its ``save_state`` names them: ``model[_i].safetensors`` (``pytorch_model[_i].bin``
with ``safe_serialization=False``), ``optimizer[_i].bin``, ``scheduler[_i].bin``,
``scaler.pt`` (fp16), ``custom_checkpoint_<i>.pkl`` and one ``random_states_<rank>.pkl`` per
process, every ``.bin``/``.pkl``/``.pt`` written by ``torch.save`` of tensors, numbers and
numpy arrays only. The main process writes the shared parts, each process its random states.
Automatic naming and ``total_limit`` rotate as Accelerate does (oldest removed before the
save). Not written: overdrive's manifest and checksums, loader positions, mid-window
gradients (what Accelerate's layout has no place for). Backends whose processes each hold
part of the state (FSDP, DeepSpeed, TP, PP) are refused: Accelerate saves those in folders of
their own.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import save_file

from overdrive.bigmodel.tensor_files import untied_tensors
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.layout import automatic_root, checkpoint_name
from overdrive.checkpoint.parts import require_prepared

if TYPE_CHECKING:
    from collections.abc import Callable

    from overdrive.checkpoint.host import CheckpointHost

FORMAT_KEY = "checkpoint_format"


def _suffix(i: int) -> str:
    return "" if i == 0 else f"_{i}"


def _target(accelerator: CheckpointHost, output_dir: str | Path | None) -> tuple[Path, bool]:
    if output_dir is not None:
        return Path(output_dir), False
    pc = accelerator.project_configuration
    root = automatic_root(pc.project_dir, pc.automatic_checkpoint_naming)
    return root / checkpoint_name(pc.iteration or 0), True


def _rotate(root: Path, total_limit: int | None) -> None:
    """Accelerate's rotation: before a save, the oldest folders go so that at most
    ``total_limit`` remain with the new one."""
    if total_limit is None or not root.is_dir():
        return
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir()),
        key=lambda p: int(p.name.rsplit("_", 1)[-1]) if p.name.rsplit("_", 1)[-1].isdigit() else -1,
    )
    for folder in folders[: max(len(folders) + 1 - total_limit, 0)]:
        shutil.rmtree(folder, ignore_errors=True)


def _rng_states(step: int) -> dict[str, Any]:
    states: dict[str, Any] = {
        "step": step,
        "random_state": random.getstate(),
        "numpy_random_seed": np.random.get_state(),
        "torch_manual_seed": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    return states


def save_accelerate_layout(
    accelerator: CheckpointHost,
    output_dir: str | Path | None = None,
    *,
    safe_serialization: bool = True,
    before_write: Callable[[Path], None] | None = None,
) -> Path:
    """Write the prepared objects' state in Accelerate's layout (each process its random
    states, the main process the rest)."""
    require_prepared(accelerator, "save_state")
    strategy = accelerator.strategy
    if not strategy.state_whole_on_every_process:
        raise CheckpointError(
            f"save_state with checkpoint_format: accelerate under {strategy.name}: Hugging "
            "Face Accelerate keeps that backend's state in its own sharded or engine folders, "
            "which this layout does not write\n  fix: use checkpoint_format: overdrive (the "
            "default) under this backend"
        )
    state = accelerator.state
    final, automatic = _target(accelerator, output_dir)
    pc = accelerator.project_configuration
    if automatic and state.is_main_process:
        _rotate(final.parent, pc.total_limit)
    # No rendezvous, as in Accelerate: a save from the main process alone works too.
    final.mkdir(parents=True, exist_ok=True)
    if before_write is not None:
        before_write(final)
    # Keyed by the user's names, as Accelerate's get_state_dict unwraps a DDP model too.
    models = [strategy.state_dict(m) for m in accelerator.prepared.models]
    optimizers = [strategy.state_dict(o) for o in accelerator.prepared.optimizers]
    if state.is_main_process:
        for i, weights in enumerate(models):
            if safe_serialization:
                tensors, _ = untied_tensors(weights)
                save_file(tensors, str(final / f"model{_suffix(i)}.safetensors"), {"format": "pt"})
            else:
                torch.save(weights, final / f"pytorch_model{_suffix(i)}.bin")
        for i, opt_state in enumerate(optimizers):
            torch.save(opt_state, final / f"optimizer{_suffix(i)}.bin")
        for i, sched in enumerate(accelerator.prepared.schedulers):
            torch.save(sched.state_dict(), final / f"scheduler{_suffix(i)}.bin")
        scaler = accelerator.precision.scaler
        if scaler is not None:
            torch.save(scaler.state_dict(), final / "scaler.pt")
        for i, obj in enumerate(accelerator.prepared.custom_objects):
            torch.save(obj.state_dict(), final / f"custom_checkpoint_{i}.pkl")
    gradient_state = getattr(accelerator, "gradient_state", None)
    step = int(getattr(gradient_state, "micro_batches", 0) or 0)
    torch.save(_rng_states(step), final / f"random_states_{state.process_index}.pkl")
    if automatic:
        pc.iteration = (pc.iteration or 0) + 1
    return final
