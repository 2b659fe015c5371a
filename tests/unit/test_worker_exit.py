"""A launched worker ends through ``worker_exit.finish``: the steps of a normal Python exit
still happen (threads joined, atexit, garbage collected, open files flushed, those in garbage
too) and the exit code stands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.dist import REPO, clean_env

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path

out = Path(sys.argv[1])
log = open(out / "unclosed.txt", "w")  # never closed: only finalization-like flushing saves it
log.write("kept\\n" * 1000)
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))


class Cycle:  # garbage in a reference cycle, holding a file it never flushed
    def __init__(self):
        self.me, self.file = self, open(out / "cycle.txt", "w")
        self.file.write("cycle\\n" * 1000)


class WritesWhenCollected:  # garbage whose finalizer writes to the open log
    def __init__(self):
        self.me = self

    def __del__(self):
        log.write("collected\\n")


Cycle()
WritesWhenCollected()
go = threading.Event()

def late_writer():
    go.wait()
    time.sleep(0.5)  # still working after the script returned: the exit must wait for it
    (out / "thread.txt").write_text("finished")

threading.Thread(target=late_writer).start()
go.set()
sys.exit(3)
"""


def test_worker_exit_keeps_what_a_normal_exit_does(tmp_path: Path) -> None:
    script = tmp_path / "ends.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.launch.bootstrap", str(script), str(tmp_path)],
        env=clean_env({"PYTHONPATH": str(REPO / "src")}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "unclosed.txt").read_text() == "kept\n" * 1000 + "collected\n"
    assert (tmp_path / "cycle.txt").read_text() == "cycle\n" * 1000
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "finished"
