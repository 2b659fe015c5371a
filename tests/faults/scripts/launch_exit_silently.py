"""Worker: rank 1 leaves with os._exit(3) (no traceback); the others wait in an all-reduce."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    os._exit(3)
dist.all_reduce(torch.ones(1))  # fails or is stopped: rank 1 never joins
print("UNREACHABLE", flush=True)
