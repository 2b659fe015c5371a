"""How a launched worker (and the ``overdrive`` command itself) ends: Python's own shutdown
steps, run while the interpreter is whole, then ``os._exit``.

Why not a normal exit: a gloo worker thread may still hold the last reference to a tensor
that has a Python object when the script returns (it drops finished collectives a moment
after signalling them done). If it drops it once the interpreter is finalizing, the thread
is stopped mid-destructor and the process aborts (SIGABRT, "terminate called without an
active exception") although the run succeeded: seen in about one 3-process run in five on
two cores, even after ``destroy_process_group()``, which leaves the group alive while
anything refers to it (``launch/group_teardown.py`` releases torch's own references).
Skipping finalization closes that window for any group left; ``multiprocessing`` children
end the same way.

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


def _open_files() -> list[io.IOBase]:
    """Every file object alive now (one walk over the heap: with transformers imported it
    holds about 400,000 objects of about a thousand types)."""
    # type(), not isinstance(): isinstance reads __class__, and some objects warn when any
    # attribute is read (torch.distributed.reduce_op). io.IOBase is an ABC, whose issubclass
    # is a registry lookup: asked once per type, the walk takes 0.10 s instead of 0.21 s.
    is_file: dict[type, bool] = {}
    files = []
    for obj in gc.get_objects():
        kind = type(obj)
        answer = is_file.get(kind)
        if answer is None:
            answer = is_file[kind] = issubclass(kind, io.IOBase)
        if answer:
            files.append(obj)
    return files


def _flush(files: list[io.IOBase]) -> None:
    """Flush these files, then the standard streams: finalization would have flushed them."""
    for stream in [*files, sys.stdout, sys.stderr]:  # the standard streams last
        # A broken pipe or a detached buffer: nothing more Python would do either.
        with contextlib.suppress(OSError, ValueError):
            if not stream.closed:
                stream.flush()


def finish(code: int) -> NoReturn:
    """End this process with ``code`` after the shutdown steps a normal exit would take."""
    _join_threads()
    atexit._run_exitfuncs()  # prints a failing callback's traceback itself, like a normal exit
    # Held here, no file is collected below: a collected cycle may close a file's binary
    # layer before its text layer, losing what the text layer still buffered. Collecting
    # runs the finalizers of the garbage left, which may still write to them.
    files = _open_files()
    gc.collect()
    _flush(files)
    os._exit(code)
