"""Worker: the rank named by argv[1] raises; every other rank waits in an all-reduce."""

import sys

import torch
import torch.distributed as dist

failing = int(sys.argv[1])
dist.init_process_group("gloo")
if dist.get_rank() == failing:
    raise RuntimeError(f"planned failure on rank {failing}")
dist.all_reduce(torch.ones(1))  # never completes: the failing rank does not join
print("UNREACHABLE", flush=True)
