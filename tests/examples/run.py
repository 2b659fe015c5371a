"""Run Hugging Face Accelerate's examples under it and, renamed, under overdrive; compare weights.

    python -m tests.examples.run [--examples nlp_example,checkpointing] [--processes 1,2]
                                 [--write-docs]

Fetches its examples (``fetch.py``), ports them with the mechanical rename of the
conformance suite (``tests/conformance/rename.py``) into ``.examples/ported``, and runs every
case of ``cases.py`` on each process count twice: the original under Hugging Face Accelerate
(its ``accelerate launch``, its package from ``.compat/site``), the ported copy under
``overdrive launch --cpu``. Both get the adaptation layer (``adapt/``) first on their path, so
the examples build a tiny BERT (or GPT-2) and generated data instead of downloading, and every
rank writes its models' final weights at exit. The weights of the two runs are compared
rank by rank; the results go to ``.examples/results.json`` and, with ``--write-docs``, a
table into docs/migrating.md (``table.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.compat.harness import free_port
from tests.conformance.rename import port_tree
from tests.examples.cases import CASES, Case, select
from tests.examples.compare import compare, moved
from tests.examples.fetch import CACHE, fetch
from tests.examples.table import write_table

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / ".compat" / "site"
ADAPT = Path(__file__).resolve().parent / "adapt"
DEPS = CACHE / "deps"  # what an example needs and overdrive does not (schedulefree)
ENGINES = ("accelerate", "overdrive")


def environment(engine: str, out: Path, backend: bool = False) -> dict[str, str]:
    """The environment of one run: no inherited launch or engine settings, one thread per
    process, no GPU, no network, the adaptation layer first and then the engine's package.
    ``backend``: the case names one in its launch flags (DeepSpeed, FSDP)."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ACCELERATE_", "OVERDRIVE_"))
    }
    package = SITE if engine == "accelerate" else REPO / "src"
    env.update(
        PYTHONPATH=os.pathsep.join([str(ADAPT), str(DEPS), str(package)]),
        EXAMPLES_ADAPT="1",
        EXAMPLES_OUT=str(out),
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        DS_ACCELERATOR="cpu",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(CACHE / "hf"),
        WANDB_MODE="disabled",
        PYTHONUNBUFFERED="1",
    )
    if engine == "accelerate" and not backend:
        # Its launcher forms a gloo group on CPUs only so; with a backend it would replace
        # that backend by plain MULTI_CPU training (DeepSpeed finds the CPU by DS_ACCELERATOR).
        env["ACCELERATE_USE_CPU"] = "1"
    return env


def command(engine: str, processes: int, case: Case, script: Path, args: list[str]) -> list[str]:
    """The launch command line: ``overdrive launch --cpu``; for Hugging Face Accelerate, its
    ``launch`` with ``--cpu`` on one process and torchrun's path (``--multi_gpu``) on more,
    as its ``--cpu`` alone starts one process whatever ``--num_processes`` says."""
    count = ["--num_processes", str(processes), "--main_process_port", str(free_port())]
    if engine == "overdrive":
        head = [sys.executable, "-m", "overdrive", "launch", "--cpu"]
    else:
        head = [sys.executable, "-m", "accelerate.commands.launch"]
        if not case.launch:  # a backend's flag excludes --cpu and --multi_gpu there
            head.append("--cpu" if processes == 1 else "--multi_gpu")
    return [*head, *count, *case.launch, str(script), *args]


def run_one(
    case: Case, engine: str, processes: int, folder: Path, timeout: float
) -> dict[str, Any]:
    """One case under one engine: whether it ran, its time, its last error line."""
    examples = fetch() / "examples" if engine == "accelerate" else CACHE / "ported" / "examples"
    result: dict[str, Any] = {}
    steps = [case.args] + ([case.resume] if case.resume else [])
    for i, flags in enumerate(steps):
        out = folder / f"{engine}-{processes}" / f"run{i}"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        first = out.parent / "run0"
        args = [a.replace("{out}", str(out)).replace("{first}", str(first)) for a in flags]
        cmd = command(engine, processes, case, examples / case.script, args)
        start = time.monotonic()
        try:
            done = subprocess.run(
                cmd,
                cwd=out,
                env=environment(engine, out, backend=bool(case.launch)),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            log, code = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            log, code = f"{exc.stdout or ''}{exc.stderr or ''}\nhung past {timeout:.0f} s", -1
        (out / "log.txt").write_text(" ".join(cmd) + "\n\n" + str(log))
        result = {"ok": code == 0, "seconds": round(time.monotonic() - start, 1), "out": str(out)}
        if code != 0:
            result["error"] = _last_error(str(log))
            break
    return result


_LAUNCHER_ERRORS = ("CalledProcessError", "ChildFailedError")
_RANK_PREFIX = re.compile(r"^\[rank ?\d+\]:? ")


def _last_error(log: str) -> str:
    """The line that says why a run failed: the last exception line of the example's own
    traceback (not the launcher's report of a failed child), else the last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        text = _RANK_PREFIX.sub("", line)
        head = text.split(":", 1)[0]
        if any(name in head for name in _LAUNCHER_ERRORS):
            continue
        if "Error" in head or text.startswith(("error:", "Exception")):
            return text[:300]
    return lines[-1][:300] if lines else "no output"


def run_case(case: Case, processes: int, timeout: float) -> dict[str, Any]:
    """One row: both engines' runs and how their final weights compare."""
    folder = CACHE / "runs" / case.name.replace(" ", "_").replace("/", "-")
    row: dict[str, Any] = {"example": case.script, "name": case.name, "processes": processes}
    for engine in ENGINES:
        row[engine] = run_one(case, engine, processes, folder, timeout)
    theirs, ours = row["accelerate"], row["overdrive"]
    if theirs["ok"] and ours["ok"]:
        row.update(compare(Path(theirs["out"]), Path(ours["out"])))
        row["moved"] = moved(Path(ours["out"]))
        if case.resume:  # each engine's resumed run against its own uninterrupted one
            for engine in ENGINES:
                run = Path(row[engine]["out"])
                own = compare(run.parent / "run0", run)
                row[engine]["resumed_vs_uninterrupted"] = own["max_abs_diff"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=None, help="comma-separated case name prefixes")
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--table-only", action="store_true", help="run nothing: write the table from results"
    )
    args = parser.parse_args(argv)
    results_path = CACHE / "results.json"
    if args.table_only:
        write_table(json.loads(results_path.read_text()), REPO / "docs" / "migrating.md")
        return 0
    if not (SITE / "accelerate").is_dir():
        raise SystemExit(
            f"error: Hugging Face Accelerate is not installed in {SITE}\n"
            "  fix: run `make examples` (it installs it there)"
        )
    port_tree(fetch() / "examples", CACHE / "ported" / "examples")
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    known = {c.name for c in CASES}  # rows of cases since renamed or removed go
    results = {k: v for k, v in results.items() if v["name"] in known}
    counts = [int(n) for n in args.processes.split(",")]
    for case in select(args.examples):
        for processes in (n for n in counts if n in case.processes):
            row = run_case(case, processes, args.timeout)
            results[f"{case.name} @{processes}"] = row
            results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
            same = row.get("max_abs_diff", "-")
            print(
                f"{case.name} on {processes}: Hugging Face Accelerate "
                f"{'ran' if row['accelerate']['ok'] else 'failed'}, overdrive "
                f"{'ran' if row['overdrive']['ok'] else 'failed'}, max abs diff {same}",
                flush=True,
            )
    if args.write_docs:
        write_table(results, REPO / "docs" / "migrating.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
