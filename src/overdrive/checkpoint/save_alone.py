"""save_state where every process holds the whole state (one process, DDP, replicas): the
main process needs no other process to write a complete checkpoint.

Libraries call ``save_state`` from the main process alone (``if accelerator.is_main_process:
accelerator.save_state(...)``, the pattern of diffusers' training scripts), so the main
process does not depend on the others. Each other process that calls ``save_state`` says
so on arrival. Once the main process has written its own files it waits a few seconds at most
(``ARRIVAL_GRACE``) for the others to arrive: those that did write their state (random
generators, data position) into the checkpoint being written, and the commit waits for them,
so a save that every process makes is as complete and atomic as any other. A process that arrives later adds its state after the
commit (``rank_<i>/`` with its own ``record.json``); a process that never calls is resumed
from the main process's state, and ``load_state`` says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from overdrive.checkpoint import integrity
from overdrive.checkpoint.errors import CheckpointError, CollectiveTimeoutError
from overdrive.checkpoint.records import FileRecord
from overdrive.checkpoint.serialization import save_tree, writing
from overdrive.checkpoint.snapshot import Snapshot, rank_state, write
from overdrive.checkpoint.sync import KeyValueStore

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost

ADDED_BY_EACH = "added by each process"
"""The manifest's ``rank_states`` for such a checkpoint: rank directories it does not list
were added after the commit, each with its own ``record.json``."""
RECORD = "record.json"
ARRIVAL_GRACE = timedelta(seconds=5)
"""How long the main process, its own files written, waits for the others to arrive before it
commits with those that did: a save every process makes lands in one atomic commit, and a
save the main process makes alone costs at most this much more."""

_CALLS: Counter[str] = Counter()
"""Per-process count of saves to each target: the n-th call of every process that calls
meets the main process's n-th save."""


def _key(accelerator: CheckpointHost, output_dir: str | Path | None) -> str:
    if output_dir is not None:
        name = str(Path(output_dir).absolute())
    else:
        name = f"automatic/{accelerator.project_configuration.iteration or 0}"
    _CALLS[name] += 1
    return f"overdrive/save_alone/{name}/{_CALLS[name]}"


def _distributed(accelerator: CheckpointHost) -> bool:
    return dist.is_available() and dist.is_initialized() and accelerator.state.num_processes > 1


def _wait_time(
    accelerator: CheckpointHost, timeout: float | None, store: KeyValueStore | None
) -> timedelta:
    seconds = timeout or accelerator.state.timeout or getattr(store, "timeout", None)
    if seconds is None:
        return timedelta(minutes=30)
    return seconds if isinstance(seconds, timedelta) else timedelta(seconds=float(seconds))


class MainSide:
    """The main process's side of one save: who joined, their files, the outcome."""

    def __init__(
        self, accelerator: CheckpointHost, output_dir: str | Path | None, timeout: float | None
    ) -> None:
        self.active = _distributed(accelerator)
        self.world = accelerator.state.num_processes
        self.key = _key(accelerator, output_dir) if self.active else ""
        self.store: KeyValueStore | None = None
        if self.active:
            self.store = dist.distributed_c10d._get_default_store()
        self.wait = _wait_time(accelerator, timeout, self.store) if self.active else None

    def gather(self, temp: Path) -> dict[str, FileRecord]:
        """After the main process wrote its files: the processes that have arrived write
        theirs into ``temp``; their file records (an error names any that failed)."""
        if not self.active:
            return {}
        assert self.store is not None and self.wait is not None
        arrivals = [f"{self.key}/here/{r}" for r in range(1, self.world)]
        # The others, if they call too, arrive at about the same time as this one; past the
        # grace (the store raises), those that did arrive join.
        with contextlib.suppress(Exception):
            self.store.wait(arrivals, ARRIVAL_GRACE)
        here = [r for r in range(1, self.world) if self.store.check([f"{self.key}/here/{r}"])]
        self.store.set(f"{self.key}/decision", json.dumps({"temp": str(temp), "join": here}))
        if not here:
            return {}
        keys = [f"{self.key}/written/{r}" for r in here]
        try:
            self.store.wait(keys, self.wait)
        except Exception:  # the store raises DistStoreError/RuntimeError on timeout
            missing = [r for r, k in zip(here, keys) if not self.store.check([k])]
            raise CollectiveTimeoutError(
                f"save_state on process 0: process(es) {missing} began the save but did not "
                f"write their state within {self.wait.total_seconds():g}s\n"
                "  fix: see those processes' errors"
            ) from None
        files: dict[str, FileRecord] = {}
        errors = []
        for rank, key in zip(here, keys):
            text = self.store.get(key).decode()
            if text.startswith("!"):
                errors.append(f"process {rank}: {text[1:]}")
            else:
                files.update(json.loads(text[1:]))
        if errors:
            raise CheckpointError(f"save_state failed on {'; '.join(errors)}")
        return files

    def tell(self, text: str) -> None:
        """Where the checkpoint went (or ``"!" + error``), for every process waiting on it
        (one that failed before deciding who joins lets nobody join)."""
        if self.active:
            assert self.store is not None
            if not self.store.check([f"{self.key}/decision"]):
                self.store.set(f"{self.key}/decision", json.dumps({"temp": "", "join": []}))
            self.store.set(f"{self.key}/final", text)


def join(
    accelerator: CheckpointHost,
    output_dir: str | Path | None,
    *,
    timeout: float | None,
    async_save: bool,
    before_write: Callable[[Path], None] | None,
    fault_point: Callable[[str], None] = lambda _stage: None,
) -> Path | Future[Path]:
    """For a process other than the main one: arrive, then write this process's state into
    the checkpoint the main process is writing (or, arrived too late, add it after).
    ``fault_point`` is called between stages (a seam for tests that kill a save)."""
    key = _key(accelerator, output_dir)
    rank = accelerator.state.process_index
    store = dist.distributed_c10d._get_default_store()
    store.set(f"{key}/here/{rank}", "1")
    snap = Snapshot(rank=rank, rank_state=rank_state(accelerator))  # now: the run goes on
    wait = _wait_time(accelerator, timeout, store)

    def finish() -> Path:
        decision = json.loads(_await(store, f"{key}/decision", wait, rank))
        if rank in decision["join"]:
            temp = Path(decision["temp"])
            try:
                if before_write is not None:
                    before_write(temp)
                store.set(f"{key}/written/{rank}", "=" + write(snap, temp, fault_point))
            except Exception as exc:
                store.set(f"{key}/written/{rank}", "!" + str(exc).splitlines()[0])
                raise
            final = _final(store, key, wait, rank)
        else:
            final = _final(store, key, wait, rank)
            if before_write is not None:
                before_write(final)
            _add_rank(final, rank, snap.rank_state)
        if output_dir is None:  # automatic naming: the next one, as on the main process
            pc = accelerator.project_configuration
            pc.iteration = int(final.name.rsplit("_", 1)[1]) + 1
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


def _await(store: KeyValueStore, key: str, wait: timedelta, rank: int) -> str:
    try:
        store.wait([key], wait)
    except Exception:  # the store raises DistStoreError/RuntimeError on timeout
        raise CollectiveTimeoutError(
            f"save_state on process {rank}: the main process did not save within "
            f"{wait.total_seconds():g}s\n  fix: call save_state on the main process too (this "
            "process's state is added to the checkpoint the main process writes)"
        ) from None
    return store.get(key).decode()


def _final(store: KeyValueStore, key: str, wait: timedelta, rank: int) -> Path:
    text = _await(store, f"{key}/final", wait, rank)
    if text.startswith("!"):
        raise CheckpointError(f"save_state failed on the main process: {text[1:]}")
    return Path(text)


def _add_rank(final: Path, rank: int, state: object) -> None:
    target = final / f"rank_{rank}"
    partial = final / f".rank_{rank}.partial"
    what = f"process {rank} state"
    with writing(final, what):
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir()
    sums: dict[Path, FileRecord] = {}
    names = save_tree(state, partial, "state", what=what, checksums=sums)
    records = integrity.record(partial, names, known=sums)
    with writing(partial, what):
        (partial / RECORD).write_text(json.dumps(records, indent=1))
        if target.exists():
            shutil.rmtree(target)
        os.replace(partial, target)


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
