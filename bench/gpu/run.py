"""Per-step time and tokens/s of a small decoder-only transformer on one device: the loop by
hand in plain PyTorch against the same loop on overdrive, for each layout that fits on one
device (world size 1) in bf16 and fp8.

    python bench/gpu/run.py                          # one CUDA GPU (what `make gpu` runs)
    python bench/gpu/run.py --write-results          # and record the table in RESULTS.md
    python bench/gpu/run.py --device cpu --smoke     # the same code, tiny, on CPU (gloo)

One process, one process group of size 1 (made here unless torchrun made it). Each variant
builds both sides (same seed, same batches) and alternates blocks of timed steps between
them; the variants share ``--budget-s`` seconds. A variant that cannot run here (no fp8
hardware, no deepspeed, TP at degree 1) gets a row saying why; one that breaks gets a
FAILED row and the exit status is 1.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import os
import sys
import time
import traceback
from pathlib import Path

STARTED = time.perf_counter()  # the budget counts torch's import too
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from report import Row, section, table, write  # noqa: E402
from timing import GPU_PLAN, SMOKE_PLAN, alternate_until, device_sync, summarise  # noqa: E402
from variants import LAYOUTS, PRECISIONS, Skip, build  # noqa: E402
from workload import workload  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument(
        "--smoke", action="store_true", help="tiny model and 2 rounds: proves the harness"
    )
    p.add_argument("--model", choices=("auto", "llama", "torch"), default="auto")
    p.add_argument("--budget-s", type=float, default=420.0, help="all variants together")
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--write-results", action="store_true", help="record the table in RESULTS.md")
    p.add_argument("--results", type=Path, default=HERE.parent / "RESULTS.md")
    return p.parse_args(argv)


def _one_process_group(device: torch.device) -> None:
    """A world of one: torchrun's, or one made here from the environment variables a launcher
    would set (overdrive reads them and reuses the group)."""
    # Settings come from the code alone: no stray ACCELERATE_*/OVERDRIVE_* from the shell.
    for key in [k for k in os.environ if k.startswith(("ACCELERATE_", "OVERDRIVE_"))]:
        del os.environ[key]
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if os.environ.setdefault("WORLD_SIZE", "1") != "1":
        raise SystemExit("bench/gpu runs one process: launch it without --nproc_per_node")
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")  # read by DeepSpeed; the group needs no port
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _device(args: argparse.Namespace) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "bench/gpu: no CUDA GPU here. This bench is for a GPU machine (`make gpu`); "
            "on a CPU run `python bench/gpu/run.py --device cpu --smoke` (`make gpu-smoke`)."
        )
    return torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> int:
    started = STARTED if argv is None else time.perf_counter()
    args = _args(argv)
    device = _device(args)
    if args.smoke:
        torch.set_num_threads(1)  # small shared machines: one core is enough to prove it
    _one_process_group(device)
    work = workload(args.model, args.smoke)
    plan = SMOKE_PLAN if args.smoke else GPU_PLAN
    sync = device_sync(device)
    batches = work.batches(device)
    tasks = [(lay, prec) for lay in args.layouts.split(",") for prec in args.precisions.split(",")]
    rows: list[Row] = []
    for i, (layout, precision) in enumerate(tasks):
        began = time.perf_counter()
        left = args.budget_s - (time.perf_counter() - started)
        deadline = time.perf_counter() + max(left, 0.0) / (len(tasks) - i)
        row = Row(layout, precision, tokens=work.sizes.tokens)
        try:
            pair = build(layout, precision, work, device)
            times = alternate_until(
                {"raw": pair.raw, "overdrive": pair.overdrive}, batches, plan, deadline, sync
            )
            row.raw, row.overdrive = summarise(times["raw"]), summarise(times["overdrive"])
            row.note = pair.note
        except Skip as why:
            row.note = str(why)
        except Exception as exc:
            traceback.print_exc()
            row.note, row.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}", True
        pair = None  # free both models before the next variant
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        rows.append(row)
        spent = time.perf_counter() - began
        print(
            f"bench/gpu: {layout} {precision} ({spent:.0f} s): {row.cells()[-1]}", file=sys.stderr
        )
    s = work.sizes
    heading = (
        f"{datetime.date.today().isoformat()}, {_device_name(device)}, torch {torch.__version__}"
    )
    body = (
        f"{table(rows)}\n\n"
        f"Model: {work.kind} decoder, {s.layers} layers, hidden {s.hidden}, vocab {s.vocab}; "
        f"batch {s.batch} x {s.seq} tokens; AdamW; one process (world 1, "
        f"{dist.get_backend()}). transformers {_version('transformers')}, deepspeed "
        f"{_version('deepspeed')}, torchao {_version('torchao')}. Budget {args.budget_s:.0f} s, "
        f"{time.perf_counter() - started:.0f} s used. Ratio: overdrive / raw (median, p10)."
    )
    command = "python bench/gpu/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(section(heading, command.strip(), body))
    if args.write_results:
        write(args.results, section(heading, command.strip(), body))
        print(f"bench/gpu: recorded in {args.results}", file=sys.stderr)
    dist.destroy_process_group()
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
