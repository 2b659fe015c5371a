"""How a launched worker ends: Python's own shutdown steps, run while the interpreter is
whole, then ``os._exit``.

Why not a normal exit: a gloo worker thread may still hold the last reference to a tensor
that has a Python object when the script returns (it drops finished collectives a moment
after signalling them done). If it drops it once the interpreter is finalizing, the thread
is stopped mid-destructor and the process aborts (SIGABRT, "terminate called without an
active exception") although the run succeeded: seen in about one 3-process run in five on
two cores, even after ``destroy_process_group()``. Skipping finalization closes that window;
``multiprocessing`` children end the same way.

What finalization would have done for the user is done here first: non-daemon threads are
joined, ``atexit`` callbacks run, every open file is flushed, and garbage is collected.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import sys
import threading
from typing import NoReturn


def _join_threads() -> None:
    """Wait for non-daemon threads, as Python does before exiting (they may start others)."""
    while True:
        waiting = [
            t
            for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()
        ]
        if not waiting:
            return
        for thread in waiting:
            thread.join()


def _flush_open_files() -> None:
    """Flush every open file object: finalization would have flushed them as it freed them."""
    # type(), not isinstance(): isinstance reads __class__, and some objects warn when any
    # attribute is read (torch.distributed.reduce_op).
    files = [o for o in gc.get_objects() if issubclass(type(o), io.IOBase)]
    for stream in [*files, sys.stdout, sys.stderr]:  # the standard streams last
        # A broken pipe or a detached buffer: nothing more Python would do either.
        with contextlib.suppress(OSError, ValueError):
            if not stream.closed:
                stream.flush()


def finish(code: int) -> NoReturn:
    """End this worker with ``code`` after the shutdown steps a normal exit would take."""
    _join_threads()
    atexit._run_exitfuncs()  # prints a failing callback's traceback itself, like a normal exit
    # Flush before collecting: a collected cycle may close a file's binary layer before its
    # text layer, losing what the text layer still buffered.
    _flush_open_files()
    gc.collect()
    _flush_open_files()
    os._exit(code)
