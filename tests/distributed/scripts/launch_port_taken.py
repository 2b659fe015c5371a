"""Driver (not a worker): run a plan whose port another program holds, as if it was just taken.

``overdrive launch`` checks the port first; this skips the check to hit the race where another
program binds the port between the check and the rendezvous. argv: script [args...].
"""

import socket
import sys

from overdrive.config import load_settings
from overdrive.launch import build_plan
from overdrive.launch.runner import run

with socket.socket() as busy:
    busy.bind(("", 0))
    busy.listen()
    port = busy.getsockname()[1]
    flags = {"use_cpu": True, "num_processes": 2, "main_process_port": port}
    plan = build_plan(load_settings(flags=flags), sys.argv[1], sys.argv[2:], rank_prefix=False)
    print(f"BUSY {port}", flush=True)
    code = run(plan, verbose=True)  # the note of the move is said at verbose
sys.exit(code)
