"""Checkpoint load speed and memory across layouts, in one run.

Saves a model with Adam state (``--gb`` of parameters) twice, under FSDP2 with sharded state
dicts on 2 processes and under DDP on 2 (whole files), then times ``load_state`` of each under
several layouts: the same one (the reference), another number of processes, one process, and
the other kind of strategy. Reports, for each, the median load time, throughput (checkpoint
bytes / time), its ratio to the same checkpoint's same-layout load, and the largest growth of
one process's memory during the load (resident, and its own without the mapped checkpoint
files) against the bound (the state / N plus one tensor under FSDP; the state plus one tensor
for one process or DDP, whose every process holds the whole model).

    .venv/bin/python bench/checkpoint_load/run.py [--gb 0.4] [--repeats 4] [--dir /tmp/load-bench]

The files are read back through the page cache (just written, and the machine has the memory
for them): this measures the reader, not the disk.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launched import launch_result  # noqa: E402

FSDP2 = ["--use_fsdp", "--fsdp_version", "2", "--fsdp_state_dict_type", "SHARDED_STATE_DICT"]
SAVES = {"FSDP2 sharded, 2 processes": (2, FSDP2), "DDP, 2 processes": (2, [])}
# (saved by, loaded by, processes, launch flags, the same-layout load it is compared with)
LOADS = [
    ("FSDP2 sharded, 2 processes", "FSDP2 sharded, 2 processes", 2, FSDP2, None),
    ("FSDP2 sharded, 2 processes", "FSDP2 sharded, 3 processes", 3, FSDP2, 0),
    ("FSDP2 sharded, 2 processes", "one process", 1, [], 0),
    ("FSDP2 sharded, 2 processes", "DDP, 2 processes", 2, [], 0),
    ("DDP, 2 processes", "DDP, 2 processes", 2, [], None),
    ("DDP, 2 processes", "FSDP2 sharded, 2 processes", 2, FSDP2, 4),
    ("DDP, 2 processes", "FSDP2 sharded, 3 processes", 3, FSDP2, 4),
    ("DDP, 2 processes", "one process", 1, [], 4),
]


def tensor_bytes(ckpt: Path) -> tuple[int, int]:
    """Bytes of the model's and optimizer's tensors in a checkpoint, and its largest tensor."""
    from safetensors import safe_open

    total = largest = 0
    for path in ckpt.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                piece = f.get_slice(name)
                n = 4
                for d in piece.get_shape():
                    n *= d
                total, largest = total + n, max(largest, n)
    return total, largest


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gb", type=float, default=0.4)
    p.add_argument("--repeats", type=int, default=4, help="loads per launch; the first is warm-up")
    p.add_argument("--dir", default="/tmp/load-bench")
    args = p.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    worker = [str(HERE / "worker.py"), "--gb", str(args.gb)]
    ckpts = {}
    for i, (name, (nprocs, flags)) in enumerate(SAVES.items()):
        ckpts[name] = root / f"ckpt_{i}"
        launch_result(nprocs, flags, [*worker, "--ckpt", str(ckpts[name]), "--phase", "save"])
    rows = []
    for saved, loaded, nprocs, flags, reference in LOADS:
        run = [*worker, "--ckpt", str(ckpts[saved]), "--phase", "load"]
        out = launch_result(nprocs, flags, [*run, "--repeats", str(args.repeats)])
        rows.append((saved, loaded, nprocs, flags, out, reference))
    print(
        "| saved under | loaded under | median load (s) | GB/s | vs same layout "
        "| peak resident growth (MB) | peak own-memory growth (MB) "
        "| bound: state/N + one tensor (MB) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for saved, loaded, nprocs, flags, out, reference in rows:
        nbytes, largest = tensor_bytes(ckpts[saved])
        seconds = statistics.median(out["seconds"])
        ratio = "1.00 (reference)"
        if reference is not None:
            ratio = f"{statistics.median(rows[reference][4]['seconds']) / seconds:.2f}"
        # a process of a sharded layout (FSDP) holds 1/N of the state; any other, all of it
        bound = (nbytes / nprocs if flags else nbytes) + largest
        print(
            f"| {saved} | {loaded} | {seconds:.2f} | {nbytes / seconds / 1e9:.2f} | {ratio} | "
            f"{out['resident'] / 1e6:.0f} | {out['anon'] / 1e6:.0f} | {bound / 1e6:.0f} |"
        )
    print(f"seconds of each load: {[(r[1], r[4]['seconds']) for r in rows]}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
