"""All-ranks-or-error coordination for save/load, through the process group's key-value store.

A plain barrier hangs forever when one rank never calls ``save_state``. The store lets every
wait carry a timeout and lets the waiting rank see which ranks did arrive, so the error can
name the ones that did not. It works the same under gloo and NCCL.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from itertools import count
from typing import Protocol

import torch.distributed as dist

from overdrive.checkpoint.errors import CheckpointError, CollectiveTimeoutError


class KeyValueStore(Protocol):
    """What a rendezvous uses of the process group's store (``torch.distributed.Store``)."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...

    def wait(self, keys: list[str], timeout: timedelta) -> None: ...

    def add(self, key: str, value: int) -> int: ...

    def compare_set(self, key: str, expected_value: str, desired_value: str) -> bytes: ...


_SEQUENCE = count()
"""Per-process call counter; every rank makes the same calls in the same order."""


class Rendezvous:
    """One collective save or load: arrival, hand-over of a value from rank 0, completion."""

    def __init__(
        self,
        op: str,
        *,
        rank: int,
        world_size: int,
        timeout: float | timedelta | None = None,
        store: KeyValueStore | None = None,
    ) -> None:
        self.op = op
        self.rank = rank
        self.world_size = world_size
        self.active = world_size > 1 and (store is not None or dist.is_initialized())
        self.store: KeyValueStore | None = store
        if self.active and store is None:
            self.store = dist.distributed_c10d._get_default_store()
        if isinstance(timeout, (int, float)):
            timeout = timedelta(seconds=timeout)
        if timeout is None and self.active:
            timeout = getattr(self.store, "timeout", None)
        self.timeout: timedelta = timeout or timedelta(minutes=30)
        # Only a rendezvous that talks to the others takes a number: a save the main process
        # makes alone must not put it out of step with them for the next collective one.
        self.prefix = f"overdrive/{op}/{next(_SEQUENCE)}" if self.active else f"overdrive/{op}/-"

    def _store(self) -> KeyValueStore:
        """The store; only a rendezvous that talks to the others (``active``) has one."""
        assert self.store is not None
        return self.store

    def _wait(self, keys: list[str], what: str, fix: str) -> None:
        try:
            self._store().wait(keys, self.timeout)
        except Exception:  # the store raises DistStoreError/RuntimeError on timeout
            missing = [k for k in keys if not self._store().check([k])]
            ranks = sorted({int(k.rsplit("/", 1)[-1]) for k in missing if k[-1].isdigit()})
            who = f"process(es) {ranks}" if ranks else "process 0"
            raise CollectiveTimeoutError(
                f"{self.op} on process {self.rank}: {who} did not {what} within "
                f"{self.timeout.total_seconds():g}s\n  fix: {fix}"
            ) from None

    def arrive(self) -> None:
        """Every rank announces itself and waits for all the others."""
        if not self.active:
            return
        self._store().set(f"{self.prefix}/arrive/{self.rank}", "1")
        keys = [f"{self.prefix}/arrive/{r}" for r in range(self.world_size)]
        self._wait(
            keys,
            f"call {self.op}",
            f"call accelerator.{self.op}() on every process, not only inside "
            "`if accelerator.is_main_process:`",
        )

    def share(self, name: str, value: str | None = None, *, failed: bool = False) -> str:
        """Rank 0 passes ``value``; every rank gets it back. ``failed``: it is rank 0's error."""
        if not self.active:
            assert value is not None
            return value
        key = f"{self.prefix}/{name}"
        if self.rank == 0:
            assert value is not None
            self._store().set(key, ("!" if failed else "=") + value)
            return value
        self._wait([key], f"finish {name} for {self.op}", "see process 0's error")
        text = self._store().get(key).decode()
        if text.startswith("!"):
            raise CheckpointError(
                f"{self.op} failed on process 0: {text[1:]}\n  fix: see process 0's error"
            )
        return text[1:]

    def decide(self, name: str, compute: Callable[[], str]) -> str:
        """Rank 0 computes a value and every rank gets it; if computing fails, every rank
        fails (rank 0 with its own error, the others naming it) instead of waiting."""
        if self.rank != 0:
            return self.share(name)
        try:
            value = compute()
        except Exception as exc:
            if self.active:
                self.share(name, str(exc), failed=True)
            raise
        return self.share(name, value)

    def done(self, step: str, error: str | None = None) -> list[str]:
        """This rank finished ``step`` (or failed with ``error``). Rank 0 waits for all of
        them and gets back the other ranks' errors; other ranks get an empty list."""
        return self.collect(step, error=error)[1]

    def collect(
        self, step: str, value: str = "", *, error: str | None = None
    ) -> tuple[list[str], list[str]]:
        """Like ``done``, with a ``value`` from each rank: rank 0 gets (every rank's value,
        in rank order, "" for a failed one; the other ranks' errors)."""
        if not self.active:
            return [value], []
        self._store().set(
            f"{self.prefix}/{step}/{self.rank}", "!" + error if error else "=" + value
        )
        if self.rank != 0:
            return [], []
        keys = [f"{self.prefix}/{step}/{r}" for r in range(self.world_size)]
        self._wait(keys, f"finish {step}", "see the other processes' errors")
        values, errors = [], []
        for r, key in enumerate(keys):
            text = self._store().get(key).decode()
            values.append(text[1:] if text.startswith("=") else "")
            if r != 0 and text.startswith("!"):
                errors.append(f"process {r}: {text[1:]}")
        return values, errors

    def all_done(self, step: str, error: str | None = None) -> list[str]:
        """Like ``done``, but every rank waits for all and gets the others' errors."""
        if not self.active:
            return []
        self._store().set(f"{self.prefix}/{step}/{self.rank}", "!" + error if error else "=")
        keys = [f"{self.prefix}/{step}/{r}" for r in range(self.world_size)]
        self._wait(keys, f"finish {step}", "see the other processes' errors")
        errors = []
        for r, key in enumerate(keys):
            text = self._store().get(key).decode()
            if r != self.rank and text.startswith("!"):
                errors.append(f"process {r}: {text[1:]}")
        return errors
