"""Rank 0 leaves last when it hosts the store.

Launched without torch's elastic agent, rank 0's process holds the key-value store the group
was formed with, and the other ranks may still read from it (a value rank 0 handed over at
the end of ``save_state``) after rank 0's script returned. So at exit every rank marks that
it is done, and rank 0 waits for those marks before its process, and the store, go away.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import timedelta

KEY = "overdrive/exit"
# A peer that never marks (it left the group early) delays rank 0's exit at most this long.
TIMEOUT = timedelta(seconds=60)


def rank_zero_leaves_last(code: int, environ: Mapping[str, str]) -> None:
    """Wait, on rank 0, for every rank of a group still open at exit (best effort: a failed
    run, a group already destroyed or a store the agent hosts need no wait)."""
    if code != 0 or environ.get("TORCHELASTIC_USE_AGENT_STORE") != "False":
        return
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return
        world, rank = dist.get_world_size(), dist.get_rank()
        if world < 2:
            return
        store = dist.distributed_c10d._get_default_store()
        store.set(f"{KEY}/{rank}", "1")
        if rank == 0:
            store.wait([f"{KEY}/{r}" for r in range(world)], TIMEOUT)
    except Exception:  # noqa: BLE001 - leaving is best effort; the exit code stands
        pass
