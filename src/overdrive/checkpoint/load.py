"""load_state: find the checkpoint, check it matches what was prepared, restore every part."""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from overdrive.checkpoint import integrity, layout, save_alone
from overdrive.checkpoint.dtypes import dtype_problems
from overdrive.checkpoint.errors import CheckpointError, CheckpointMismatchError
from overdrive.checkpoint.fill import fill_all, read_or_fill
from overdrive.checkpoint.legacy import load_accelerate_layout, looks_legacy
from overdrive.checkpoint.nearby import missing_fix
from overdrive.checkpoint.optimizer_keys import (
    convert,
    from_deepspeed,
    keyed_by_name,
    parameter_names,
    to_deepspeed,
)
from overdrive.checkpoint.parts import FORMAT, Part, compare, main_parts, require_prepared
from overdrive.checkpoint.records import FileRecord, Manifest, RankState, StateDict
from overdrive.checkpoint.resumable import continues_mid_epoch, refuse_unresumable
from overdrive.checkpoint.save import wait_for_pending
from overdrive.checkpoint.serialization import load_tree, read_json
from overdrive.checkpoint.shard_reader import full_tensor, load_shards
from overdrive.checkpoint.sync import Rendezvous
from overdrive.checkpoint.unread import load_unread
from overdrive.processes.random_state import restore_rng_state

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


def find_checkpoint(accelerator: CheckpointHost, input_dir: str | Path | None) -> Path:
    """The directory to load: the one given, or the newest complete automatic checkpoint."""
    if input_dir is not None:
        path = Path(input_dir)
        if not path.is_dir():
            what = "is not a directory" if path.exists() else "does not exist"
            fix = missing_fix(path, accelerator.project_configuration.project_dir)
            # A save over it killed between its two renames leaves the old one aside.
            for old in layout.old_dirs_for(path):
                if layout.is_complete(old):
                    fix = f"the previous checkpoint of that name is intact in {old}; rename it back"
            raise CheckpointError(f"load_state: {path} {what}\n  fix: {fix}")
        return path
    pc = accelerator.project_configuration
    if not pc.project_dir:
        raise CheckpointError(
            "load_state() got no directory and no project_dir is set to search\n"
            "  fix: pass a directory, load_state('path/to/ckpt'), or set "
            "ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True)"
        )
    root = layout.checkpoints_root(pc.project_dir)
    newest = layout.newest_complete(root)
    if newest is None:
        raise CheckpointError(
            f"load_state() found no complete checkpoint under {root}\n"
            "  fix: save one first with save_state(), or pass a directory"
        )
    return newest


def read_manifest(path: Path) -> Manifest:
    marker = path / layout.MANIFEST
    if not marker.is_file():
        raise CheckpointError(
            f"load_state: {path} has no completion marker ({layout.MANIFEST}); the save that "
            "wrote it did not finish on every process, or it is not an overdrive checkpoint\n"
            "  fix: load an earlier checkpoint (load_state() with no path picks the newest "
            "complete one)"
        )
    manifest = read_json(marker)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"load_state: {marker} is not an overdrive checkpoint manifest")
    files = manifest.get("files")
    if manifest.get("version", 1) >= 2 and not isinstance(files, dict):
        raise CheckpointError(
            f"load_state: {marker} lists no file checksums, which every checkpoint of its "
            f"version records\n  fix: the manifest is damaged; load another checkpoint"
        )
    return cast(Manifest, manifest)  # an overdrive manifest, as checked above


def _restore_part(accelerator: CheckpointHost, part: Part, state: object) -> None:
    strategy = accelerator.strategy
    try:
        if part.kind == "model":
            model = accelerator.prepared.models[part.index]
            strategy.load_state_dict(model, _state_dict(state), strict=True)
        elif part.kind == "optimizer":
            optimizer = accelerator.prepared.optimizers[part.index]
            strategy.load_state_dict(optimizer, _state_dict(state))
        else:
            part.obj.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"load_state: {part.label} does not fit the saved state: {exc}\n"
            f"  fix: build the {part.kind.replace('_', ' ')} exactly as in the run that saved "
            "the checkpoint"
        ) from exc


def _state_dict(state: object) -> StateDict:
    """A saved state dict (a model's, an optimizer's, the precision's) as its ``state_dict``
    gave it at save time (DeepSpeed's engine state included), keyed and read for this run."""
    return cast(StateDict, state)


def _restore_rank(accelerator: CheckpointHost, state: RankState, rng: bool = True) -> None:
    # Hugging Face Accelerate's load_state leaves a prepared loader where it is: its next
    # iteration starts a new epoch, drawn from the restored random streams, and the script
    # skips what it already trained on (skip_first_batches, or counting steps). A loader that
    # continues mid-epoch by itself is asked for: use_stateful_dataloader=True (Accelerate's
    # switch) or overdrive's exact_resume.
    for loader, loader_state in zip(accelerator.prepared.dataloaders, state["dataloaders"]):
        if continues_mid_epoch(accelerator, loader):
            loader.load_state_dict(loader_state)
            exact = getattr(loader, "resumed_exactly", None)
            if accelerator.exact_resume and exact is not None:
                exact()
    gradient_state = getattr(accelerator, "gradient_state", None)
    if gradient_state is not None and "accumulation" in state:
        # Accelerate's saved micro-batch counter ("step"): where the open window stands.
        gradient_state.load_state_dict(state["accumulation"])
    if accelerator.exact_resume:
        for model, grads in zip(accelerator.prepared.models, state.get("grads", [])):
            for name, p in accelerator.unwrap_model(model).named_parameters():
                if name in grads:
                    p.grad = _like_param(grads[name], p)
    if rng:
        restore_rng_state(state["rng"])


def _like_param(grad: torch.Tensor, param: nn.Parameter) -> torch.Tensor:
    """A saved gradient placed like ``param`` (this process's shard of a DTensor)."""
    if hasattr(param, "device_mesh"):
        from torch.distributed.tensor import DTensor

        sharded = cast(DTensor, param)
        local = grad.to(device=sharded.to_local().device, dtype=param.dtype)
        return DTensor.from_local(
            local, sharded.device_mesh, sharded.placements, shape=param.shape, stride=param.stride()
        )
    return grad.to(device=param.device, dtype=param.dtype)


def _template(accelerator: CheckpointHost, part: Part, *, sharded: bool) -> object:
    """How this run lays out a part: its live state, sharded (DTensors, boxes, placeholders;
    collective) or whole."""
    strategy = accelerator.strategy
    if part.kind == "model":
        model = accelerator.prepared.models[part.index]
        return strategy.state_dict(model, sharded=True) if sharded else strategy.state_dict(model)
    optimizer = accelerator.prepared.optimizers[part.index]
    if sharded:
        return strategy.state_dict(optimizer, sharded=True)
    return strategy.state_dict(optimizer)


def _restore_sharded(accelerator: CheckpointHost, part: Part, state: object) -> None:
    strategy = accelerator.strategy
    try:
        if part.kind == "model":
            model = accelerator.prepared.models[part.index]
            strategy.load_state_dict(model, _state_dict(state), sharded=True)
        else:
            optimizer = accelerator.prepared.optimizers[part.index]
            strategy.load_state_dict(optimizer, _state_dict(state), sharded=True)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"load_state: {part.label} does not fit the saved shards: {exc}\n"
            f"  fix: build the {part.kind} exactly as in the run that saved the checkpoint"
        ) from exc


def keyed_for_strategy(
    accelerator: CheckpointHost, part: Part, state: object, model_states: list[object]
) -> object:
    """A saved optimizer state keyed as this run's strategy loads it: by parameter name
    (FSDP, TP, PP), by index (one process, DDP) or in DeepSpeed's form; converted when
    another layout saved it. ``model_states``: the models' saved states (DeepSpeed's masters)."""
    by_name = accelerator.strategy.optimizer_state_by_name
    if not isinstance(state, dict) or "param_groups" not in state:
        return state  # an empty tree (a process that does not read it) or an engine's own
    if by_name is None:  # DeepSpeed
        if "masters" in state:
            return state
        if not keyed_by_name(state):
            raise CheckpointError(
                f"load_state: {part.label} was saved by one process or DDP, keyed by position, "
                "and DeepSpeed cannot tell which parameter each entry belongs to\n  fix: "
                "resume it under one process, DDP, FSDP, TP or PP, or save it under FSDP "
                "(keyed by name) to move it to DeepSpeed"
            )
        masters = {k: v for m in model_states if isinstance(m, dict) for k, v in m.items()}
        return to_deepspeed(state, masters, what=part.label)
    if accelerator.strategy.optimizer_holds_a_part and not keyed_by_name(state):
        raise CheckpointError(
            f"load_state: {part.label} was saved by one process or DDP, keyed by position, and "
            "this process's optimizer holds only its pipeline stage's parameters, so it cannot "
            "tell which saved entries are its own\n  fix: resume it under one process, DDP, "
            "FSDP or TP, and save there under FSDP or TP (keyed by name) to move it to "
            "pipeline parallelism"
        )
    models = [accelerator.unwrap_model(m) for m in accelerator.prepared.models]
    optimizer = cast(torch.optim.Optimizer, part.obj)  # not DeepSpeed's: a torch optimizer
    names = parameter_names(optimizer, models, accelerator.strategy.checkpoint_names())
    if names is None:
        return state
    if "masters" in state:  # DeepSpeed's: fp32 masters beside the per-name state
        state = from_deepspeed(state, names, what=part.label)
    return convert(state, names, to_names=by_name, what=part.label)


def _rank_dir(accelerator: CheckpointHost, path: Path, manifest: Manifest) -> Path:
    """This process's saved state; on another world size, process 0's (said once)."""
    rank, world = accelerator.state.process_index, accelerator.state.num_processes
    saved = manifest.get("world_size")
    own = path / f"rank_{rank}"
    if saved == world and (own.is_dir() or manifest.get("rank_states") != save_alone.ADDED_BY_EACH):
        return own
    if saved == world:  # saved by the main process alone: this process's state is not there
        warnings.warn(
            f"load_state: {path} was written by the main process alone (save_state called "
            f"only there), so it holds no state of process {rank}: this process keeps its "
            "own RNG streams, as under Hugging Face Accelerate (its dropout and random "
            "augmentation draw differently from an uninterrupted run; call save_state on "
            "every process to save each one's state)",
            UserWarning,
            stacklevel=4,
        )
        return path / "rank_0"
    if rank == 0:
        per_process = accelerator.scheduler_advances_per_process()
        schedule = (
            f"; a prepared scheduler that advances once per process per optimizer step (the "
            f"default without split_batches) now advances {world} time(s) per step where "
            f"{saved} processes with these settings advanced it {saved} times "
            "(SchedulerKwargs(once_per_optimizer_step=True) makes the schedule independent of "
            "the number of processes)"
            if per_process
            else ""
        )
        warnings.warn(
            f"load_state: {path} was saved by {saved} process(es) and is resumed by {world}; "
            "model and optimizer state reshard exactly, every process continues from process "
            "0's data position and RNG state, so dropout and random augmentation draw "
            f"differently from an uninterrupted run{schedule}",
            UserWarning,
            stacklevel=4,
        )
    return path / "rank_0"


def _labels(parts: list[Part], rank: int) -> dict[str, str]:
    """What each file this process reads holds, for error messages."""
    stems = {p.stem: p.label for p in parts}
    stems["precision"] = "precision state"
    stems[f"rank_{rank}/state"] = f"process {rank} state"
    return {
        f"{stem}{ext}": label for stem, label in stems.items() for ext in (".json", ".safetensors")
    }


def _verified_here(
    files: Mapping[str, FileRecord], rank_dir: str, rank: int, world: int
) -> Callable[[str], bool]:
    """The files this process checks: the rank directory it reads, and its share of every
    other file (shared and shard files, dealt out largest first to the process with the
    fewest bytes so far, the same way on every process). Each such file is checked by
    exactly one process, and any failure fails the load everywhere."""
    shared = sorted(
        (name for name in files if "/" not in name),
        key=lambda name: (-int(files[name].get("size") or 0), name),
    )
    load = [0] * world
    mine = set()
    for name in shared:
        who = load.index(min(load))
        load[who] += int(files[name].get("size") or 0)
        if who == rank:
            mine.add(name)

    def wanted(name: str) -> bool:
        if "/" in name:
            return name.startswith(rank_dir + "/")
        return name in mine

    return wanted


def _verify_everywhere(
    rv: Rendezvous,
    accelerator: CheckpointHost,
    path: Path,
    manifest: Manifest,
    rank_dir: str,
    parts: list[Part],
) -> None:
    """Each process checks its share of the files; none restores anything until all of them
    found theirs intact (a damaged file fails the load on every process, nothing restored)."""
    rank, world = accelerator.state.process_index, accelerator.state.num_processes
    try:
        integrity.verify(
            path,
            manifest["files"],
            only=_verified_here(manifest["files"], rank_dir, rank, world),
            labels=_labels(parts, rank),
        )
        listed = any(name.startswith(rank_dir + "/") for name in manifest["files"])
        if not listed and manifest.get("rank_states") == save_alone.ADDED_BY_EACH:
            save_alone.verify_added(path / rank_dir)  # added after the commit, checked alone
    except CheckpointError as exc:
        rv.all_done("verify", str(exc).splitlines()[0])
        raise
    failures = rv.all_done("verify")
    if failures:
        raise CheckpointError(
            f"{failures[0]}\n  fix: load another checkpoint (an earlier one, or an intact "
            "copy of this one); nothing was restored from this one"
        )


def _load_all(
    accelerator: CheckpointHost, path: Path, allow_unsafe_pickle: bool, rv: Rendezvous
) -> None:
    manifest = read_manifest(path)
    parts = main_parts(accelerator)
    problems = compare(manifest, parts, accelerator)
    if problems:
        raise CheckpointMismatchError(
            str(path),
            problems,
            "prepare() and register_for_checkpointing() the same objects, in the same order "
            "and with the same number of processes, as the run that saved it",
        )
    refuse_unresumable(accelerator, path, allow_unsafe_pickle)  # first, and alone
    rank = accelerator.state.process_index
    rank_dir = _rank_dir(accelerator, path, manifest)
    # Read everything before changing anything: a damaged file leaves the run untouched on
    # every process (each file is verified by one of them, and all wait for all).
    if "files" in manifest:  # checkpoints of version 1 carry no checksums
        _verify_everywhere(rv, accelerator, path, manifest, rank_dir.name, parts)
    saved_sharded = {(p["kind"], p["index"]): bool(p.get("sharded")) for p in manifest["parts"]}
    sliced = {
        p.stem
        for p in parts
        if (
            p.sharded or (p.kind in ("model", "optimizer") and accelerator.strategy.loads_in_slices)
        )
        # a legacy pickle file (loaded only when allowed) is read whole, as it was written
        and (saved_sharded[(p.kind, p.index)] or (path / f"{p.stem}.json").is_file())
    }
    whole = {  # a strategy whose processes hold whole tensors: still read straight into them
        p.stem
        for p in parts
        if p.stem not in sliced
        and p.kind in ("model", "optimizer")
        and accelerator.strategy.optimizer_state_by_name is not None  # not DeepSpeed's engine
        and (saved_sharded[(p.kind, p.index)] or (path / f"{p.stem}.json").is_file())
    }
    states: dict[str, object] = {}
    for p in parts:
        saved = saved_sharded[(p.kind, p.index)]
        if p.stem in sliced | whole:  # nothing read yet: each process reads its own part, below
            states[p.stem] = load_unread(path, p.stem, what=p.label, sharded=saved)
        elif saved:  # another layout's shards, read whole
            states[p.stem] = load_shards(path, p.stem, what=p.label, place=full_tensor)
        else:
            states[p.stem] = load_tree(
                path, p.stem, what=p.label, allow_unsafe_pickle=allow_unsafe_pickle
            )
    model_states = [states[p.stem] for p in parts if p.kind == "model"]
    for p in parts:
        if p.kind == "optimizer":
            states[p.stem] = keyed_for_strategy(accelerator, p, states[p.stem], model_states)
    fills = {}
    for p in parts:  # keyed as this run loads them: this process's part of each, planned
        if p.stem in sliced | whole:  # to be copied straight into the live tensors that fit
            template = _template(accelerator, p, sharded=p.stem in sliced)
            states[p.stem], fill = read_or_fill(states[p.stem], template)
            if fill is not None:
                fills[p.stem] = fill
    precision_state = load_tree(
        path, "precision", what="precision state", allow_unsafe_pickle=allow_unsafe_pickle
    )
    rank_state = cast(  # as snapshot.rank_state wrote it
        RankState,
        load_tree(
            rank_dir, "state", what=f"process {rank} state", allow_unsafe_pickle=allow_unsafe_pickle
        ),
    )
    problems = dtype_problems(accelerator, parts, states, rank_state)
    if problems:
        raise CheckpointMismatchError(
            str(path),
            problems,
            "build the model (and so the optimizer) in the dtypes of the run that saved it, "
            "e.g. the same .half()/.to(torch.bfloat16) before prepare(); loading does not cast",
        )
    if rank_dir.name != f"rank_{rank}" and rank_state.get("grads"):
        raise CheckpointError(
            f"load_state: {path} was saved inside an accumulation window by "
            f"{manifest.get('world_size')} process(es); their partial gradients cannot be "
            f"split over {accelerator.state.num_processes}\n"
            "  fix: resume with the same number of processes, or from a checkpoint saved "
            "when a window closed (accelerator.sync_gradients is True)"
        )
    # The parts read the old way go first: their restore may still refuse them. A filled
    # part was checked against the live state whole, so its restore cannot fail, and it is
    # written only now.
    filled = set(fills)
    for part in sorted(parts, key=lambda part: part.stem in filled):
        if fills and part.stem in filled:  # the first filled part: every planned copy now
            fill_all(list(fills.values()))
            fills.clear()
        if part.stem in sliced:
            _restore_sharded(accelerator, part, states[part.stem])
        else:
            _restore_part(accelerator, part, states[part.stem])
    if precision_state:
        accelerator.precision.load_state_dict(_state_dict(precision_state))
    # A checkpoint the main process wrote alone holds no other process's RNG streams: those
    # keep theirs, as Hugging Face Accelerate's load_state leaves a process whose
    # random_states file is absent.
    world = accelerator.state.num_processes
    alone = rank_dir.name != f"rank_{rank}" and manifest.get("world_size") == world
    _restore_rank(accelerator, rank_state, rng=not alone)


def load_state(
    accelerator: CheckpointHost,
    input_dir: str | Path | None = None,
    *,
    allow_unsafe_pickle: bool = False,
    timeout: float | None = None,
    **_: object,
) -> None:
    """Restore what save_state wrote; collective, strict about mismatched parts."""
    require_prepared(accelerator, "load_state")
    wait_for_pending(accelerator)  # an asynchronous save still being written comes first
    state = accelerator.state
    rank, world = state.process_index, state.num_processes
    rv = Rendezvous("load_state", rank=rank, world_size=world, timeout=timeout or state.timeout)
    rv.arrive()
    path = Path(rv.decide("path", lambda: str(find_checkpoint(accelerator, input_dir))))
    error: str | None = None
    try:
        if rank == 0:
            save_alone.clear_leftovers(path)
        if looks_legacy(path):
            load_accelerate_layout(accelerator, path, allow_unsafe_pickle)
        else:
            _load_all(accelerator, path, allow_unsafe_pickle, rv)
    except Exception as exc:
        error = "".join(traceback.format_exception_only(exc)).strip()
        rv.all_done("load", error)
        raise
    failures = rv.all_done("load")
    if failures:
        raise CheckpointError(
            f"load_state from {path} failed on other processes: {'; '.join(failures)}"
        )
    if path.parent.name == layout.CHECKPOINTS_DIR and path.name.startswith("checkpoint_"):
        suffix = path.name.rsplit("_", 1)[1]
        if suffix.isdigit():
            accelerator.project_configuration.iteration = int(suffix) + 1
