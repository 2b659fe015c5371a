"""Driver (not a worker): run a one-machine plan in this process, then say whether the launcher
imported torch. argv: port_grab_marker script [args...].

With a marker path other than ``-``, the environment asks the worker (``launch_grab_port.py``)
to hold the main process port on its first start, as another program would take it between
the launcher's check and rank 0's bind.
"""

import os
import sys

from overdrive.config import load_settings
from overdrive.launch import build_plan
from overdrive.launch.ports import settle_port
from overdrive.launch.runner import run

marker, script, *args = sys.argv[1:]
if marker != "-":
    os.environ["GRAB_PORT_MARKER"] = marker
plan = build_plan(
    load_settings(flags={"use_cpu": True, "num_processes": 2}), script, args, rank_prefix=False
)
plan = settle_port(plan)  # as `overdrive launch`: the default port becomes a free one
print(f"FIRST_PORT {plan.main_port}", flush=True)
code = run(plan)  # at the default level: a late move must still say why the script restarts
print(f"LAUNCHER_IMPORTED_TORCH {'torch' in sys.modules}", flush=True)
sys.exit(code)
