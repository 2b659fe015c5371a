"""save_state where every process holds the whole state (one process, DDP, replicas): the
main process needs no other process to write a complete checkpoint.

Libraries call ``save_state`` from the main process alone (``if accelerator.is_main_process:
accelerator.save_state(...)``, the pattern of diffusers' training scripts), so the main
process never waits for a process that may not come. Saves are matched by the training
position (``position``: each optimizer's steps, the open accumulation window, each
dataloader's epoch and batch), which every process keeps identically, never by counting
calls: the main process publishes each save it starts under its position, and another
process's ``save_state`` at that position puts its state (random generators, data
position) into that save, whatever directory it was given:

- before the main process commits: into the save being written, and the commit waits for it
  (a process that arrives first waits for the main process's save and is always taken in);
- after the commit: into the committed checkpoint (``rank_<i>/`` with its own
  ``record.json``, written into a locked ``.rank_<i>.<token>.partial`` and renamed);
- a checkpoint removed meanwhile (``total_limit``, or saved over): into the newest one of
  the same position, never into one of another position.

A process that never calls is resumed from the main process's state, and ``load_state``
says so. The handshakes are compare-and-set operations on the process group's store, so
the main process and a late process always agree on which of the two cases happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from overdrive.checkpoint import atomic, integrity, layout
from overdrive.checkpoint.errors import CheckpointError, CollectiveTimeoutError
from overdrive.checkpoint.records import FileRecord
from overdrive.checkpoint.serialization import read_json, save_tree, writing
from overdrive.checkpoint.snapshot import Snapshot, rank_state, write
from overdrive.checkpoint.sync import KeyValueStore

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost

ADDED_BY_EACH = "added by each process"
"""The manifest's ``rank_states`` for such a checkpoint: rank directories it does not list
were added after the commit, each with its own ``record.json``."""
RECORD = "record.json"
_ROOT = "overdrive/save_alone"
# A process's place in one save (its "slot"), set by compare-and-set from "" (not decided):
JOIN = "join"  # it writes into the save before the commit, which waits for it
CLOSED = "closed"  # committed without it: it may add its state after
ADDING = "adding"  # it is adding its state to the committed checkpoint
ADDED = "added"  # its state is in the committed checkpoint
RETIRED = "retired"  # the checkpoint is being removed: nothing more goes into it
_POSITION_KEYS = ("epoch", "batches_yielded", "_num_yielded", "_iterator_finished")

_CALLS: Counter[str] = Counter()
"""Per process and position: the index of the main process's save there that this
process's next save at that position takes (two saves at one position are told apart)."""


def position(accelerator: CheckpointHost) -> str:
    """Where training stands, the same on every process at one point of the loop: each
    prepared optimizer's steps, the open accumulation window, each dataloader's position."""
    gradient_state = getattr(accelerator, "gradient_state", None)
    prepared = accelerator.prepared
    parts = [
        [getattr(o, "steps_tried", None) for o in prepared.optimizers],
        getattr(gradient_state, "micro_batches", None),
        [_loader_position(dl) for dl in prepared.dataloaders],
    ]
    text = json.dumps(parts, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _loader_position(loader: object) -> list[object]:
    state_dict = getattr(loader, "state_dict", None)
    if not callable(state_dict):
        return []
    try:
        state = state_dict()
    except Exception:  # a loader that cannot say where it is adds nothing to the position
        return []
    return [state.get(k) for k in _POSITION_KEYS] if isinstance(state, dict) else []


def _at(pos: str, suffix: str) -> str:
    return f"{_ROOT}/at/{pos}/{suffix}"


def _of(save_id: str, suffix: str) -> str:
    return f"{_ROOT}/save/{save_id}/{suffix}"


def _name(output_dir: str | Path | None) -> str:
    return "" if output_dir is None else str(Path(output_dir).absolute())


def _distributed(accelerator: CheckpointHost) -> bool:
    return dist.is_available() and dist.is_initialized() and accelerator.state.num_processes > 1


def _store() -> KeyValueStore:
    store: KeyValueStore = dist.distributed_c10d._get_default_store()
    return store


def _wait_time(
    accelerator: CheckpointHost, timeout: float | None, store: KeyValueStore | None
) -> timedelta:
    seconds = timeout or accelerator.state.timeout or getattr(store, "timeout", None)
    if seconds is None:
        return timedelta(minutes=30)
    return seconds if isinstance(seconds, timedelta) else timedelta(seconds=float(seconds))


def _swap(store: KeyValueStore, key: str, expected: str, desired: str) -> str:
    """Compare-and-set; the value the key holds afterwards."""
    return store.compare_set(key, expected, desired).decode()


class MainSide:
    """The main process's side of one save: published under its position, closed at the
    commit, and the end of checkpoints it removes."""

    def __init__(
        self, accelerator: CheckpointHost, output_dir: str | Path | None, timeout: float | None
    ) -> None:
        self.active = _distributed(accelerator)
        self.world = accelerator.state.num_processes
        self.id = secrets.token_hex(8)
        self.name = _name(output_dir)
        self.store: KeyValueStore | None = _store() if self.active else None
        self.position = position(accelerator) if self.active else ""
        self.wait = _wait_time(accelerator, timeout, self.store)

    def _others(self) -> range:
        return range(1, self.world) if self.active else range(0)

    def publish(self, temp: Path | None) -> None:
        """The save's temp dir exists (None: choosing it failed): processes at this position
        may now write into it. One already waiting for it is taken in at once."""
        if not self.active:
            return
        assert self.store is not None
        index = self.store.add(_at(self.position, "count"), 1) - 1
        record = {"id": self.id, "name": self.name, "temp": "" if temp is None else str(temp)}
        self.store.set(_at(self.position, f"save/{index}"), json.dumps(record))
        for rank in self._others():
            if self.store.check([_at(self.position, f"waiting/{index}/{rank}")]):
                _swap(self.store, _of(self.id, f"slot/{rank}"), "", JOIN)

    def gather(self, temp: Path) -> dict[str, FileRecord]:
        """At the commit, this process's files written: the processes that took a place in
        this save have written theirs into ``temp`` (waited for); their file records. The
        others' places close: they add their state after the commit, if they come."""
        if not self.active:
            return {}
        assert self.store is not None
        joined = [r for r in self._others() if self._close(r) == JOIN]
        keys = [_of(self.id, f"written/{r}") for r in joined]
        if not keys:
            return {}
        try:
            self.store.wait(keys, self.wait)
        except Exception:  # the store raises DistStoreError/RuntimeError on timeout
            missing = [r for r, k in zip(joined, keys) if not self.store.check([k])]
            raise CollectiveTimeoutError(
                f"save_state on process 0: process(es) {missing} began the save but did not "
                f"write their state within {self.wait.total_seconds():g}s\n"
                "  fix: see those processes' errors"
            ) from None
        files: dict[str, FileRecord] = {}
        errors = []
        for rank, key in zip(joined, keys):
            text = self.store.get(key).decode()
            if text.startswith("!"):
                errors.append(f"process {rank}: {text[1:]}")
            else:
                files.update(json.loads(text[1:]))
        if errors:
            raise CheckpointError(f"save_state failed on {'; '.join(errors)}")
        return files

    def _close(self, rank: int) -> str:
        assert self.store is not None
        return _swap(self.store, _of(self.id, f"slot/{rank}"), "", CLOSED)

    def tell(self, text: str) -> None:
        """Where the checkpoint went (or ``"!" + error``), for every process waiting on it;
        a save that failed before its commit takes no one in."""
        if not self.active:
            return
        assert self.store is not None
        if text.startswith("!"):
            for rank in self._others():
                self._close(rank)
        self.store.set(_of(self.id, "final"), text)

    def retire(self, path: Path) -> None:
        """Before ``path`` is removed (``total_limit``) or saved over: nothing more goes
        into it; a process adding its state to it right now finishes first."""
        if not self.active or not layout.is_complete(path):
            return
        assert self.store is not None
        try:
            manifest = read_json(path / layout.MANIFEST)
        except CheckpointError:  # damaged: no save of this run can be adding to it
            return
        save_id = manifest.get("save_id") if isinstance(manifest, dict) else None
        if not isinstance(save_id, str):
            return  # not written by a save of this kind
        for rank in self._others():
            slot = _of(save_id, f"slot/{rank}")
            now = _swap(self.store, slot, "", RETIRED)
            while now != RETIRED and now != JOIN:
                if now == ADDING:  # a few small files: wait until they are in
                    self.store.wait([_of(save_id, f"done/{rank}")], self.wait)
                    now = self.store.get(slot).decode()
                now = _swap(self.store, slot, now, RETIRED)


def join(
    accelerator: CheckpointHost,
    output_dir: str | Path | None,
    *,
    timeout: float | None,
    async_save: bool,
    before_write: Callable[[Path], None] | None,
    fault_point: Callable[[str], None] = lambda _stage: None,
) -> Path | Future[Path]:
    """For a process other than the main one: put this process's state into the main
    process's save at this training position (waiting for it if this process came first).
    ``fault_point`` is called between stages (a seam for tests that kill a save)."""
    rank = accelerator.state.process_index
    store = _store()
    wait = _wait_time(accelerator, timeout, store)
    pos = position(accelerator)
    snap = Snapshot(rank=rank, rank_state=rank_state(accelerator))  # now: the run goes on
    joiner = _Joiner(store, pos, rank, wait, snap, before_write, fault_point)

    def finish() -> Path:
        index = joiner.choose(_name(output_dir), _CALLS[pos])
        _CALLS[pos] = index + 1
        final = joiner.place(index)
        if output_dir is None and layout.index_of(final) is not None:
            # automatic naming: the next one, as on the main process
            accelerator.project_configuration.iteration = int(final.name.rsplit("_", 1)[1]) + 1
        return final

    if not async_save:
        return finish()
    future: Future[Path] = Future()

    def run() -> None:
        try:
            future.set_result(finish())
        except BaseException as exc:  # the waiter re-raises it
            future.set_exception(exc)

    threading.Thread(target=run, name="overdrive-save-rank", daemon=True).start()
    accelerator.pending_save = future
    return future


class _Joiner:
    """One save of a process other than the main one."""

    def __init__(
        self,
        store: KeyValueStore,
        pos: str,
        rank: int,
        wait: timedelta,
        snap: Snapshot,
        before_write: Callable[[Path], None] | None,
        fault_point: Callable[[str], None],
    ) -> None:
        self.store, self.pos, self.rank, self.wait = store, pos, rank, wait
        self.snap, self.before_write, self.fault_point = snap, before_write, fault_point

    def _record(self, index: int) -> dict[str, str]:
        record: dict[str, str] = json.loads(self.store.get(_at(self.pos, f"save/{index}")))
        return record

    def choose(self, name: str, first: int) -> int:
        """The main process's save this one takes: of those at this position from ``first``
        on, the one into the same directory, else the first; if there is none yet, the
        next one the main process starts here (waited for)."""
        count = self.store.add(_at(self.pos, "count"), 0)
        for index in range(first, count):
            if self._record(index)["name"] == name:
                return index
        if first < count:
            return first
        self.store.set(_at(self.pos, f"waiting/{first}/{self.rank}"), "1")
        _await(self.store, _at(self.pos, f"save/{first}"), self.wait, self.rank)
        return first

    def place(self, index: int) -> Path:
        """Put the state into save ``index``; if that checkpoint is being removed, into the
        newest other one of this position. Where it went."""
        final = self._put(index)
        if final is not None:
            return final
        count = self.store.add(_at(self.pos, "count"), 0)
        for other in reversed(range(count)):
            if other != index and (final := self._put(other)) is not None:
                return final
        gone = _final(self.store, self._record(index)["id"], self.wait, self.rank)
        warnings.warn(
            f"save_state on process {self.rank}: {gone} was removed (total_limit, or saved "
            "over) before this process's state reached it, and no other checkpoint of this "
            "training position remains, so this process's state was not saved",
            UserWarning,
            stacklevel=4,
        )
        return gone

    def _put(self, index: int) -> Path | None:
        """This process's state into save ``index``: its final path, or None if removed."""
        record = self._record(index)
        save_id = record["id"]
        slot = _of(save_id, f"slot/{self.rank}")
        now = _swap(self.store, slot, "", JOIN)
        if now == JOIN:  # before the commit: into the save being written
            self._write_into(save_id, Path(record["temp"]))
            return _final(self.store, save_id, self.wait, self.rank)
        final = _final(self.store, save_id, self.wait, self.rank)
        if now == CLOSED:
            now = _swap(self.store, slot, CLOSED, ADDING)
            if now == ADDING:
                try:
                    if self.before_write is not None:
                        self.before_write(final)
                    _add_rank(final, self.rank, self.snap.rank_state, self.fault_point)
                finally:
                    _swap(self.store, slot, ADDING, ADDED)
                    self.store.set(_of(save_id, f"done/{self.rank}"), "1")
                return final
        return final if now == ADDED else None  # ADDED: an earlier save put it there

    def _write_into(self, save_id: str, temp: Path) -> None:
        key = _of(save_id, f"written/{self.rank}")
        try:
            if self.before_write is not None:
                self.before_write(temp)
            self.store.set(key, "=" + write(self.snap, temp, self.fault_point))
        except Exception as exc:
            self.store.set(key, "!" + (str(exc).splitlines() or [type(exc).__name__])[0])
            if not temp.is_dir():  # the main process failed first and removed the save
                _final(self.store, save_id, self.wait, self.rank)  # raises its error
            raise


def _await(store: KeyValueStore, key: str, wait: timedelta, rank: int) -> str:
    try:
        store.wait([key], wait)
    except Exception:  # the store raises DistStoreError/RuntimeError on timeout
        raise CollectiveTimeoutError(
            f"save_state on process {rank}: the main process did not save at this training "
            f"position within {wait.total_seconds():g}s\n  fix: call save_state on the main "
            "process too, at the same step (this process's state goes into the checkpoint "
            "the main process writes there)"
        ) from None
    return store.get(key).decode()


def _final(store: KeyValueStore, save_id: str, wait: timedelta, rank: int) -> Path:
    text = _await(store, _of(save_id, "final"), wait, rank)
    if text.startswith("!"):
        raise CheckpointError(f"save_state failed on the main process: {text[1:]}")
    return Path(text)


def _add_rank(final: Path, rank: int, state: object, fault_point: Callable[[str], None]) -> None:
    """``rank_<rank>/`` added to committed checkpoint ``final``: written into a locked
    partial directory (one left by a killed attempt is removed), then renamed into place."""
    target = final / f"rank_{rank}"
    what = f"process {rank} state"
    staging = atomic.stage_beside(target, f".rank_{rank}.", make_parent=False)
    try:
        sums: dict[Path, FileRecord] = {}
        names = save_tree(state, staging.path, "state", what=what, checksums=sums)
        records = integrity.record(staging.path, names, known=sums)
        with writing(staging.path, what):
            (staging.path / RECORD).write_text(json.dumps(records, indent=1))
        fault_point("adding rank files")
        with writing(target, what):
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging.path, target)
    except BaseException:
        staging.remove()
        raise
    staging.release()


def clear_leftovers(path: Path) -> None:
    """Remove what a process killed while adding its state to ``path`` left there (a live
    one's partial directory is locked, and kept)."""
    atomic.clear_stale(path, ".rank_")


def verify_added(rank_dir: Path) -> None:
    """Check a rank directory added after the commit against its own record."""
    path = rank_dir / RECORD
    if not path.is_file():
        raise CheckpointError(
            f"load_state: {rank_dir} holds no {RECORD}: it was not completely written\n"
            "  fix: load another checkpoint, or delete this directory to resume this process "
            "from the main process's state"
        )
    integrity.verify(rank_dir, json.loads(path.read_text()))
