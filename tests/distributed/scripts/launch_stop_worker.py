"""Worker without torch for the launcher's stop tests. argv: mode folder.

``stubborn``: every rank notes each SIGTERM it gets and carries on, so only SIGKILL ends it.
``exit0``: rank 0 ends with exit code 0 when it gets SIGTERM; rank 1 fails once rank 0 is
ready, so the launcher stops rank 0.
"""

import os
import signal
import sys
import time
from pathlib import Path

mode, folder = sys.argv[1], Path(sys.argv[2])
rank = int(os.environ["RANK"])


def noted(signum: int, frame: object) -> None:
    with open(folder / f"term{rank}", "a") as out:
        out.write("SIGTERM\n")
    if mode == "exit0":
        sys.exit(0)


signal.signal(signal.SIGTERM, noted)
(folder / f"ready{rank}").write_text(str(os.getpid()))
if mode == "exit0" and rank == 1:
    while not (folder / "ready0").exists():  # rank 0's handler is in place once it exists
        time.sleep(0.01)
    raise RuntimeError("rank 1 fails on purpose")
while True:
    signal.pause()
