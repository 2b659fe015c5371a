"""At exit, the group overdrive created is destroyed and its gloo threads joined, also after
an optimizer imported ``torch._dynamo`` (which imports ``torch.distributed.nn.functional``,
whose default arguments hold the group), and under FSDP2 (``fsdp2`` argument: DTensor's
caches hold the device mesh, and so the group). Prints each rank's gloo thread count before
exit and once the teardown has run.

With ``explicit``, the script destroys the group itself and then frees its DDP model: the
group must outlive the model (DDP's reducer would end it holding the GIL, which deadlocks
against a gloo worker still finishing the barrier) and end at exit."""

from __future__ import annotations

import atexit
import gc
import os
import sys
from pathlib import Path

import torch

from overdrive import Accelerator, FullyShardedDataParallelPlugin


def gloo_threads() -> int:
    """Threads of this process that gloo's process group runs (Linux names them)."""
    tasks = Path("/proc/self/task")
    return sum((t / "comm").read_text().startswith("pt_gloo") for t in tasks.iterdir())


RANK = os.environ["RANK"]
# Registered before the Accelerator exists, so it runs after the Accelerator's teardown.
atexit.register(lambda: print(f"rank {RANK}: gloo threads at exit: {gloo_threads()}", flush=True))


def main() -> None:
    fsdp2 = FullyShardedDataParallelPlugin(fsdp_version=2) if "fsdp2" in sys.argv else None
    acc = Accelerator(cpu=True, fsdp_plugin=fsdp2)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    assert "torch.distributed.nn.functional" in sys.modules, "the hazard was not set up"
    model, opt = acc.prepare(model, opt)
    acc.backward(model(torch.ones(2, 3)).sum())
    opt.step()
    acc.gather(torch.ones(2))
    acc.wait_for_everyone()
    print(f"rank {RANK}: gloo threads before exit: {gloo_threads()}", flush=True)
    if "explicit" in sys.argv:
        acc.state.destroy_process_group()
        del model, opt
        acc.free_memory()
        gc.collect()
        print(f"rank {RANK}: gloo threads once the model is freed: {gloo_threads()}", flush=True)


if __name__ == "__main__":
    main()
