"""Worker: rank 1 is stuck before the all-reduce that every other rank enters.

argv: out_dir, how rank 1 is stuck ("sleep" or "sigstop"), collective timeout in seconds (0:
the default). Every other rank writes ``entered_<rank>`` (its time.time()) just before the
all-reduce.
"""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from overdrive import InitProcessGroupKwargs
from overdrive.state import PartialState

out_dir, how, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
timeout = timedelta(seconds=seconds) if seconds else None
state = PartialState(init_kwargs=InitProcessGroupKwargs(timeout=timeout))
if state.process_index == 1:
    if how == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)  # STUCK-HERE
path = os.path.join(out_dir, f"entered_{state.process_index}")
with open(path + ".tmp", "w") as handle:
    handle.write(repr(time.time()))
os.replace(path + ".tmp", path)
dist.all_reduce(torch.ones(1))
print("UNREACHABLE", flush=True)
