"""Worker: rank 1 fails on the first attempt (marker file absent), then all ranks succeed."""

import json
import os
import sys

import torch
import torch.distributed as dist

marker = sys.argv[1]
dist.init_process_group("gloo")
if dist.get_rank() == 1 and not os.path.exists(marker):
    open(marker, "w").close()
    raise RuntimeError("first attempt fails")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
row = {"rank": dist.get_rank(), "sum": total.item(), "restart": restart}
sys.stdout.write("RESULT " + json.dumps(row) + "\n")
sys.stdout.flush()
dist.destroy_process_group()
