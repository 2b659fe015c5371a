"""How many threads one process uses to verify and copy checkpoint bytes.

Hashing (zlib) and tensor copies release the GIL, so threads scale with cores. A process
takes its share of this machine's cores: all of them when it loads alone, one when as many
processes as cores load at once (the launcher's ``LOCAL_WORLD_SIZE``), so processes never
fight over cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MOST = 8  # beyond this the page cache and memory bandwidth, not cores, set the pace


def io_threads() -> int:
    """This process's share of the cores it may run on (at least 1, at most ``MOST``)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, min(MOST, cores // local))


def run_all(work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[work(x) for x in items]``, spread over ``io_threads()`` threads; the first
    exception raised by any item is raised here, after every item finished."""
    todo = list(items)
    threads = min(io_threads(), len(todo))
    if threads <= 1:
        return [work(x) for x in todo]
    with ThreadPoolExecutor(threads, thread_name_prefix="overdrive-io") as pool:
        futures = [pool.submit(work, x) for x in todo]
    return [f.result() for f in futures]
