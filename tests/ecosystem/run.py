"""Run TRL's and diffusers' training scripts, unchanged, under Hugging Face Accelerate and
under overdrive, side by side on CPU processes; compare losses, weights and checkpoints.

    python -m tests.ecosystem.run [--cases sft,train_unconditional] [--processes 1,2]
                                  [--write-docs] [--table-only]

The libraries (pinned in the Makefile's ``ECOSYSTEM_DEPS``) are in the test-only
``.ecosystem/site``; TRL's scripts and config files come from its wheel there, diffusers'
scripts from its repository (``fetch.py``). Every case of ``cases.py`` runs on each process
count twice: under Hugging Face Accelerate (its ``accelerate launch``, its package from
``.compat/site``) and under ``overdrive launch --cpu --as_accelerate`` (no real accelerate on
the path, so ``import accelerate`` gets overdrive). Both get ``adapt/`` first on their path,
which records every rank's losses and what its accelerator reports (``engine-rank{N}.json``).
The models and data are tiny and built here (``build.py``), offline. Results go to
``.ecosystem/results.json`` and, with ``--write-docs``, a table into docs/ecosystem.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.compat.harness import free_port
from tests.ecosystem import compare as cmp
from tests.ecosystem.build import asset_paths
from tests.ecosystem.cases import CASES, DIFFUSERS, Case, fill, select
from tests.ecosystem.fetch import CACHE, fetch, recorded
from tests.ecosystem.table import write_table
from tests.examples.run import _last_error

REPO = Path(__file__).resolve().parents[2]
COMPAT_SITE = REPO / ".compat" / "site"
SITE = CACHE / "site"
ADAPT = Path(__file__).resolve().parent / "adapt"
ENGINES = ("accelerate", "overdrive")
BACKEND_CONFIGS = ("fsdp", "zero")  # config files whose backend Hugging Face Accelerate's
# ACCELERATE_USE_CPU would replace by plain MULTI_CPU training


def environment(engine: str, out: Path, case: Case) -> dict[str, str]:
    """One run's environment: no inherited launch or engine settings, one thread per process,
    no GPU, no network; the adaptation layer first, the libraries, then the engine: the
    Hugging Face Accelerate's package, or nothing more for overdrive (its launcher's alias answers
    ``import accelerate``)."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ACCELERATE_", "OVERDRIVE_", "ECOSYSTEM_"))
    }
    path = [str(ADAPT), str(SITE)] + ([str(COMPAT_SITE)] if engine == "accelerate" else [])
    if engine == "overdrive":
        path.append(str(REPO / "src"))
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        ECOSYSTEM_OUT=str(out),
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        DS_ACCELERATOR="cpu",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(CACHE / "hf"),
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    if case.seed_torch:
        env["ECOSYSTEM_SEED"] = "0"
    backend = case.config is not None and case.config.startswith(BACKEND_CONFIGS)
    if engine == "accelerate" and not backend:
        # Its launcher forms a gloo group on CPUs only so (tests/examples/run.py says why).
        env["ACCELERATE_USE_CPU"] = "1"
    return env


def script_path(case: Case) -> Path:
    """The unchanged script: from TRL's wheel, or diffusers' fetched examples."""
    if case.source == DIFFUSERS:
        return fetch() / "examples" / case.script
    return SITE / "trl" / "scripts" / f"{case.script}.py"


def config_path(case: Case) -> Path | None:
    """TRL's shipped accelerate config file, as shipped (in its wheel)."""
    return SITE / "trl" / "accelerate_configs" / case.config if case.config else None


def command(engine: str, processes: int, case: Case, script: Path, args: list[str]) -> list[str]:
    """The launch: ``overdrive launch --cpu --as_accelerate``; Hugging Face Accelerate's own
    ``launch``, with ``--cpu`` on one process and torchrun's path (``--multi_gpu``) on more,
    as its ``--cpu`` alone starts one process whatever ``--num_processes`` says. A config file
    goes to both as it is; only ``--num_processes`` (and overdrive's ``--cpu``) is added."""
    count = ["--num_processes", str(processes), "--main_process_port", str(free_port())]
    config = config_path(case)
    if engine == "overdrive":
        head = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--as_accelerate"]
    else:
        head = [sys.executable, "-m", "accelerate.commands.launch"]
        if config is None:
            head.append("--cpu" if processes == 1 else "--multi_gpu")
    if config is not None:
        head += ["--config_file", str(config)]
    return [*head, *count, str(script), *args]


def _launch(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return -1, f"{out}{err}\nhung past {timeout:.0f} s"


def run_one(
    case: Case, engine: str, processes: int, folder: Path, assets: dict[str, str], timeout: float
) -> dict[str, Any]:
    """One case under one engine: the uninterrupted run, then the resumed one if the case
    has one. Each run's folder is its working folder and holds ``out/`` and the records."""
    result: dict[str, Any] = {"runs": []}
    steps = [None] + ([case.resume_from] if case.resume_from else [])
    for i, resume in enumerate(steps):
        run = folder / f"{engine}-{processes}" / f"run{i}"
        if run.exists():
            shutil.rmtree(run)
        run.mkdir(parents=True)
        for name in case.cwd_files:
            shutil.copy2(Path(assets["root"]) / name, run / Path(name).name)
        values = {"out": str(run / "out")}
        args = fill(case.args, assets, **values)
        if resume is not None:  # a copy of one checkpoint of the first run, alone
            first = run.parent / "run0" / "out"
            name = cmp.resume_checkpoint(first, resume)
            shutil.copytree(first / name, run / "out" / name)
            args += fill(case.resume_args, assets, checkpoint=str(run / "out" / name), **values)
            result["resumed_from"] = name
        cmd = command(engine, processes, case, script_path(case), args)
        start = time.monotonic()
        code, log = _launch(cmd, run, environment(engine, run, case), timeout)
        (run / "log.txt").write_text(" ".join(cmd) + "\n\n" + log)
        result["runs"].append(str(run))
        result.update(ok=code == 0, seconds=round(time.monotonic() - start, 1), out=str(run))
        if i == 0:  # what the accelerator reported in the uninterrupted run
            result["facts"] = cmp.read_facts(run)
        if code != 0:
            result["error"] = _last_error(log)
            break
    first = Path(result["runs"][0])
    if case.checkpoint_holds or case.checkpoints_kept:
        result["checkpoints"] = cmp.checkpoint_report(
            first / "out", case.checkpoints_kept, case.checkpoint_holds
        )
    if case.resume_from and result["ok"]:
        last = Path(result["out"])
        result["resumed_vs_uninterrupted"] = cmp.compare_weights(
            cmp.safetensors_in(first / "out"), cmp.safetensors_in(last / "out")
        )
        result["resumed_losses"] = cmp.resumed_tail(cmp.read_losses(first), cmp.read_losses(last))
    return result


def run_case(case: Case, processes: int, assets: dict[str, str], timeout: float) -> dict[str, Any]:
    """One row: both engines' runs, and how their losses, weights and checkpoints compare."""
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in case.name)
    folder = CACHE / "runs" / slug
    row: dict[str, Any] = {"name": case.name, "processes": processes, "source": case.source}
    if case.config:
        row["config"] = case.config
    for engine in ENGINES:
        row[engine] = run_one(case, engine, processes, folder, assets, timeout)
    theirs, ours = row["accelerate"], row["overdrive"]
    if theirs["ok"] and ours["ok"]:  # the uninterrupted runs, then the resumed ones
        for key, index in (("", 0), ("resumed_", 1)):
            if index >= len(theirs["runs"]):
                break
            a, b = Path(theirs["runs"][index]), Path(ours["runs"][index])
            row[f"{key}losses"] = cmp.compare_losses(cmp.read_losses(a), cmp.read_losses(b))
            row[f"{key}weights"] = cmp.compare_weights(
                cmp.safetensors_in(a / "out"), cmp.safetensors_in(b / "out")
            )
        if case.checkpoint_holds:
            first_a, first_b = Path(theirs["runs"][0]), Path(ours["runs"][0])
            row["checkpoint_weights"] = cmp.compare_checkpoint_files(
                first_a / "out", first_b / "out", case.checkpoint_holds
            )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="comma-separated case name prefixes")
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--table-only", action="store_true", help="run nothing: write the table from results"
    )
    args = parser.parse_args(argv)
    results_path = CACHE / "results.json"
    doc = REPO / "docs" / "ecosystem.md"
    if args.table_only:
        write_table(json.loads(results_path.read_text()), doc, recorded())
        return 0
    for folder, fix in (
        (COMPAT_SITE / "accelerate", "make ecosystem"),
        (SITE / "trl", "make ecosystem"),
    ):
        if not folder.is_dir():
            raise SystemExit(f"error: {folder} is not installed\n  fix: run `{fix}`")
    fetch()
    assets = build_assets()
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    known = {c.name for c in CASES}
    results = {k: v for k, v in results.items() if v["name"] in known}
    counts = [int(n) for n in args.processes.split(",")]
    for case in select(args.cases):
        for processes in (n for n in counts if n in case.processes):
            row = run_case(case, processes, assets, args.timeout)
            results[f"{case.name} @{processes}"] = row
            results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
            print(summary(row), flush=True)
    against_ddp(results)
    results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.write_docs:
        write_table(results, doc, recorded())
    return 0


DDP_CONFIG = "multi_gpu.yaml"


def against_ddp(results: dict[str, dict[str, Any]]) -> None:
    """For a config file's row, each engine's final weights against its own run of the same
    script under ``multi_gpu.yaml`` (DDP) on as many processes: whether the backend the file
    names changed the numbers (``vs_ddp``)."""
    ddp = {r["processes"]: r for r in results.values() if r.get("config") == DDP_CONFIG}
    for row in results.values():
        reference = ddp.get(row["processes"])
        if not row.get("config") or row["config"] == DDP_CONFIG or reference is None:
            continue
        row["vs_ddp"] = {
            engine: cmp.compare_weights(
                cmp.safetensors_in(Path(reference[engine]["out"]) / "out"),
                cmp.safetensors_in(Path(row[engine]["out"]) / "out"),
            )
            for engine in ENGINES
            if row[engine]["ok"] and reference[engine]["ok"]
        }


def summary(row: dict[str, Any]) -> str:
    """One line per row for the console."""
    ran = {
        e: "ran" if row[e]["ok"] else f"failed ({row[e].get('error', '')[:120]})" for e in ENGINES
    }
    weights = row.get("weights", {})
    return (
        f"{row['name']} on {row['processes']}: accelerate {ran['accelerate']}, overdrive "
        f"{ran['overdrive']}; losses {row.get('losses', {}).get('equal', '-')}, weights "
        f"{'bitwise' if weights.get('bitwise') else weights.get('max_abs_diff', '-')}"
    )


def build_assets() -> dict[str, str]:
    """The tiny models and data (``build.py``), built once in a process of their own with the
    libraries and Hugging Face Accelerate on its path (peft, which diffusers imports, imports
    ``accelerate``); the same files serve both engines."""
    root = CACHE / "assets"
    env = environment("accelerate", CACHE, CASES[0])
    env.pop("ECOSYSTEM_OUT")
    env["PYTHONPATH"] += os.pathsep + str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "tests.ecosystem.build", str(root)],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: building the tiny models failed:\n{done.stderr[-3000:]}")
    return {**{k: str(v) for k, v in asset_paths(root).items()}, "root": str(root)}


if __name__ == "__main__":
    sys.exit(main())
