"""Driver (not a worker): run a 2-process one-machine plan in this process with the stop grace
given in seconds. argv: grace script [args...]."""

import sys

from overdrive.config import load_settings
from overdrive.launch import build_plan, direct
from overdrive.launch.ports import settle_port
from overdrive.launch.runner import run

grace, script, *args = sys.argv[1:]
direct.SHUTDOWN_GRACE_S = float(grace)
plan = build_plan(
    load_settings(flags={"use_cpu": True, "num_processes": 2}), script, args, rank_prefix=False
)
sys.exit(run(settle_port(plan)))
