"""save_state: every rank writes its part into a hidden temp dir; the main process marks and
renames it once all ranks are done, then rotates old automatic checkpoints."""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from overdrive.checkpoint import atomic, integrity, layout, save_alone
from overdrive.checkpoint.accelerate_save import save_accelerate_layout
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.parts import FORMAT, VERSION, describe, main_parts, require_prepared
from overdrive.checkpoint.records import FileRecord, Manifest
from overdrive.checkpoint.snapshot import Snapshot, take, write
from overdrive.checkpoint.sync import Rendezvous
from overdrive.version import __version__

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


def _fault_point(stage: str) -> None:
    """A seam for tests that kill a process at a given stage of a save; does nothing."""


def target_dir(accelerator: CheckpointHost, output_dir: str | Path | None) -> tuple[Path, bool]:
    """(final directory, automatically named?) for a save; decided by the main process."""
    if output_dir is not None:
        return Path(output_dir), False
    pc = accelerator.project_configuration
    root = layout.automatic_root(pc.project_dir, pc.automatic_checkpoint_naming)
    index = layout.next_index(root, pc.iteration or 0)
    return root / layout.checkpoint_name(index), True


def _check_window(accelerator: CheckpointHost) -> None:
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


def manifest_of(accelerator: CheckpointHost, final: Path, files: dict[str, FileRecord]) -> Manifest:
    """The manifest of a save of ``accelerator`` into ``final`` holding ``files``."""
    precision_state = accelerator.precision.state_dict()
    return {
        "format": FORMAT,
        "version": VERSION,
        "overdrive_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "name": final.name,
        "world_size": accelerator.state.num_processes,
        "parts": describe(main_parts(accelerator)),
        "dataloaders": len(accelerator.prepared.dataloaders),
        "precision": {
            "name": getattr(accelerator.precision, "name", "no"),
            "has_state": bool(precision_state),
        },
        "checksum": integrity.ALGORITHM,
        "files": files,
    }


def save_state(
    accelerator: CheckpointHost,
    output_dir: str | Path | None = None,
    *,
    timeout: float | None = None,
    async_save: bool = False,
    before_write: Callable[[Path], None] | None = None,
    **kwargs: object,
) -> Path | Future[Path]:
    """Save everything needed to resume exactly; collective (call it on every process),
    except where every process holds the whole state (``save_alone``): there the main
    process may call it alone.

    ``before_write(directory)`` runs on every process with the directory being written (it
    becomes the checkpoint when the save completes), so files it writes are part of it.

    Returns the checkpoint's path; with ``async_save`` a ``Future`` of it, returned once the
    state is copied to host memory while the files are written and synced in the
    background (the next save or load, and ``end_training``, wait for it).
    """
    require_prepared(accelerator, "save_state")
    wait_for_pending(accelerator)
    if accelerator.project_configuration.checkpoint_format == "accelerate":
        return save_accelerate_layout(
            accelerator, output_dir, before_write=before_write, **_accelerate_args(kwargs)
        )
    _check_window(accelerator)
    state = accelerator.state
    rank, world = state.process_index, state.num_processes
    alone = world > 1 and accelerator.strategy.state_whole_on_every_process
    if alone and rank != 0:
        return save_alone.join(
            accelerator,
            output_dir,
            timeout=timeout,
            async_save=async_save,
            before_write=before_write,
            fault_point=lambda stage: _fault_point(stage),
        )
    # Alone: the main process waits for no other to arrive (it may be the only one calling).
    main_side = save_alone.MainSide(accelerator, output_dir, timeout) if alone else None
    rv = Rendezvous(
        "save_state", rank=rank, world_size=1 if alone else world, timeout=timeout or state.timeout
    )
    rv.arrive()

    staging: atomic.Staging | None = None

    def prepare_target() -> str:
        nonlocal staging
        final, automatic = target_dir(accelerator, output_dir)
        staging = atomic.stage(final, automatic=automatic)
        return json.dumps({"final": str(final), "temp": str(staging.path), "auto": automatic})

    try:
        shared = json.loads(rv.decide("target", prepare_target))
    except Exception as exc:
        if main_side is not None:  # processes waiting for this save get its error
            main_side.publish(None)
            main_side.tell("!" + _one_line(exc))
        raise
    final, temp, automatic = Path(shared["final"]), Path(shared["temp"]), shared["auto"]
    if main_side is not None:
        main_side.publish(temp)
    snap: Snapshot | None = None
    error: Exception | None = None
    try:
        if before_write is not None:
            before_write(temp)
        snap = take(accelerator, copy=async_save)
    except Exception as exc:
        error = exc
    manifest = manifest_of(accelerator, final, {})
    if main_side is not None:
        manifest["rank_states"] = save_alone.ADDED_BY_EACH
        manifest["save_id"] = main_side.id

    def finish() -> Path:
        args = (accelerator, rv, snap, error, staging, manifest, final, temp, automatic)
        if main_side is None:
            return _finish(*args)
        try:
            done = _finish(*args, main_side=main_side)
        except Exception as exc:
            main_side.tell("!" + _one_line(exc))
            raise
        main_side.tell(str(done))
        return done

    if not async_save:
        return finish()
    future: Future[Path] = Future()
    worker = threading.Thread(target=_run_into, args=(finish, future), name="overdrive-save")
    accelerator.pending_save = future
    worker.start()
    return future


def _accelerate_args(kwargs: dict[str, object]) -> dict[str, bool]:
    """``safe_serialization`` for Hugging Face Accelerate's layout (its default: True)."""
    return {"safe_serialization": kwargs.get("safe_serialization", True) is not False}


def _run_into(fn: Callable[[], Path], future: Future[Path]) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:  # the waiter re-raises it
        future.set_exception(exc)


def wait_for_pending(accelerator: CheckpointHost) -> Path | None:
    """Wait for an asynchronous save still being written; its path (or its error)."""
    future = accelerator.pending_save
    if future is None:
        return None
    accelerator.pending_save = None
    return future.result()


def _finish(
    accelerator: CheckpointHost,
    rv: Rendezvous,
    snap: Snapshot | None,
    error: Exception | None,
    staging: atomic.Staging | None,
    manifest: Manifest,
    final: Path,
    temp: Path,
    automatic: bool,
    main_side: save_alone.MainSide | None = None,
) -> Path:
    """Write this process's files, then (main process) check every process and commit.
    ``main_side``: a save the main process makes without a rendezvous (the processes that
    joined it wrote their files into ``temp`` meanwhile; checkpoints it removes are
    retired there first)."""
    rank = accelerator.state.process_index
    record = "{}"
    if error is None and snap is not None:
        try:
            record = write(snap, temp, lambda stage: _fault_point(stage))
        except Exception as exc:
            error = exc
    message = None if error is None else _one_line(error)
    if rank != 0:
        rv.collect("write", record, error=message)
        try:
            final = Path(rv.share("final"))  # rank 0 has committed, or cleaned up
        except CheckpointError:
            if error is None:
                raise
        if error is not None:
            raise error
    else:
        assert staging is not None
        try:
            records, others = rv.collect("write", record, error=message)
            if error is not None:
                raise error
            if others:
                raise CheckpointError(f"save_state to {final} failed on {'; '.join(others)}")
            files: dict[str, FileRecord] = {}
            for text in records:
                files.update(json.loads(text))
            retire = None
            if main_side is not None:
                files.update(main_side.gather(temp))
                retire = main_side.retire
                if not automatic:  # saved over: nothing more goes into the one it replaces
                    retire(final)
            manifest = {**manifest, "files": files}
            final = atomic.commit(staging, final, manifest, replace=not automatic)
            if automatic:
                pc = accelerator.project_configuration
                layout.rotate(final.parent, pc.total_limit, keep=final, before_retire=retire)
        except Exception as exc:
            staging.remove()  # at once (nothing, once it was renamed into place)
            rv.share("final", _one_line(exc), failed=True)
            raise
        finally:
            staging.release()
        rv.share("final", str(final))
    if automatic:
        accelerator.project_configuration.iteration = int(final.name.rsplit("_", 1)[1]) + 1
    return final


def _one_line(exc: BaseException) -> str:
    """The error as passed on to the other processes: overdrive's own message as it is
    (it names the file and the fix), anything else behind its class name."""
    if isinstance(exc, CheckpointError):
        return str(exc).strip()
    return "".join(traceback.format_exception_only(exc)).strip()
