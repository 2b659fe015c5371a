"""Worker: start a child process, publish both pids in argv[1], then wait to be stopped."""

import os
import subprocess
import sys
import time

import torch.distributed as dist

out_dir = sys.argv[1]
dist.init_process_group("gloo")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
path = os.path.join(out_dir, f"pids_{dist.get_rank()}")
with open(path + ".tmp", "w") as handle:
    handle.write(f"{os.getpid()} {child.pid}")
os.replace(path + ".tmp", path)
while True:  # the launcher's SIGTERM ends this
    time.sleep(1)
