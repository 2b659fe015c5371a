"""Sample another process's resident memory until told to stop; print the peaks.

    python peak_rss.py PID   (stop it with SIGTERM; prints ``anon_peak hwm`` in bytes)

A separate process, so a long C call in the watched one (holding its GIL) cannot pause the
sampling. ``RssAnon`` is the process's own memory (tensors); the kernel's ``VmHWM`` also counts
the pages of memory-mapped files it touched (the page cache it read the checkpoint through).
"""

from __future__ import annotations

import signal
import sys
import time


def _kib(status: str, field: str) -> int:
    line = next(x for x in status.splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def main() -> None:
    pid = int(sys.argv[1])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    peak = hwm = 0
    print("ready", flush=True)
    while not stop:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            break
        if "RssAnon:" not in status:  # exited, not yet reaped (a zombie has no memory lines)
            break
        peak = max(peak, _kib(status, "RssAnon"))
        hwm = _kib(status, "VmHWM")
        time.sleep(0.0005)
    print(peak, hwm, flush=True)


if __name__ == "__main__":
    main()
