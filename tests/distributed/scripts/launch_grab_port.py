"""Worker: on the first start only (no file at $GRAB_PORT_MARKER yet), rank 0 binds the main
process port before joining the group, so the group cannot form there; then as
``launch_allreduce.py``, with the TORCHELASTIC_* variables the worker sees."""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

marker = os.environ.get("GRAB_PORT_MARKER")
holder = None
if os.environ["RANK"] == "0" and marker and not os.path.exists(marker):
    open(marker, "w").close()
    holder = socket.socket()
    holder.bind(("", int(os.environ["MASTER_PORT"])))
    holder.listen()
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
names = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE")
names += ("LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR")
names += ("TORCH_NCCL_ASYNC_ERROR_HANDLING",)
elastic = {k: v for k, v in os.environ.items() if k.startswith("TORCHELASTIC_") or k in names}
row = {"rank": dist.get_rank(), "sum": total.item(), "port": os.environ["MASTER_PORT"]}
sys.stdout.write("RESULT " + json.dumps({**row, "elastic": elastic}) + "\n")
sys.stdout.flush()
dist.destroy_process_group()
