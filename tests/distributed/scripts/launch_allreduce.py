"""Worker: join the gloo group, all-reduce the rank numbers, print one RESULT line as JSON."""

import json
import os
import sys

import torch
import torch.distributed as dist

from overdrive.config import HANDOVER_VARIABLE, Settings

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
handed = Settings.from_json(os.environ[HANDOVER_VARIABLE])
result = {
    "rank": rank,
    "world": world,
    "sum": total.item(),
    "argv": sys.argv[1:],
    "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
    "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "-1")),
    "num_processes_source": str(handed.source("num_processes")),
    "main": __name__,
}
sys.stdout.write("RESULT " + json.dumps(result) + "\n")  # one write: lines never interleave
sys.stdout.flush()
dist.destroy_process_group()
