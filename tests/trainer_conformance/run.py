"""Run transformers' own Trainer tests, unchanged, on Hugging Face Accelerate and on overdrive.

    python -m tests.trainer_conformance.run [--files test_trainer,...] [-k EXPR]
        [--timeout S] [--write-docs]

Each chosen file of ``.trainer-conformance/src/tests/trainer`` (``fetch.py`` puts it there)
runs under pytest twice, on CPU: once with Hugging Face Accelerate (accelerate, from the
test-only ``.compat/site``) on the path, once under ``python -m overdrive.run -m pytest``,
where ``import accelerate`` gives overdrive and no real accelerate is on the path. Every
test's outcome goes to ``.trainer-conformance/results.json`` (a file run again replaces its
entry); ``--write-docs`` writes the per-file table into docs/trainer.md. A file that runs past
``--timeout`` seconds is ended with all its processes; the tests it finished keep their
outcomes and the one it was in is ``hung``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.trainer_conformance.fetch import fetch, is_fetched, source_folder
from tests.trainer_conformance.outcomes import FileOutcomes, read_log
from tests.trainer_conformance.seeded import check
from tests.trainer_conformance.table import passing, write_table

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".trainer-conformance"
# Hugging Face Accelerate, test-only (`make trainer` installs it; OVERDRIVE_COMPAT_SITE may point elsewhere)
SITE = Path(os.environ.get("OVERDRIVE_COMPAT_SITE", REPO / ".compat" / "site")).resolve()
DEPS = CACHE / "deps"  # their test dependencies overdrive does not need (datasets, ...)
PLUGIN = Path(__file__).resolve().parent / "plugin"
ENGINES = ("accelerate", "overdrive")
POLL_S = 5.0  # how often a running file is checked against its time limit
# The single-process files, in the order they run (the distributed ones start processes).
DEFAULT_FILES = [
    "test_trainer_accelerator",
    "test_training_args",
    "test_loss_reduction",
    "test_trainer_data",
    "test_trainer_evaluation",
    "test_trainer",
    "test_trainer_checkpointing",
]


def environment(engine: str) -> dict[str, str]:
    """The environment of one engine's run: CPU only, offline, nothing of the caller's
    accelerate/overdrive settings, the engine's packages first on the path."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ACCELERATE_", "OVERDRIVE_"))
    }
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    # No network here: the tests that download models or data fail at once under both.
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update(HF_HOME=str(CACHE / "hf"), XDG_CACHE_HOME=str(CACHE / "xdg"))
    env.update(WANDB_DISABLED="true", DISABLE_MLFLOW_INTEGRATION="TRUE")
    first = [str(SITE)] if engine == "accelerate" else [str(REPO / "src")]
    env["PYTHONPATH"] = os.pathsep.join([*first, str(DEPS), str(PLUGIN)])
    return env


def command(engine: str, target: str, selection: str | None) -> list[str]:
    """pytest on ``target``; under overdrive, started by ``overdrive.run`` (the alias on)."""
    start = (
        [sys.executable, "-m", "overdrive.run", "-m"]
        if engine == "overdrive"
        else [
            sys.executable,
            "-m",
        ]
    )
    cmd = [*start, "pytest", "-q", "-p", "no:cacheprovider", "-p", "trainer_conformance_log"]
    cmd += ["-o", "addopts=", target]
    return cmd + (["-k", selection] if selection else [])


def run_file(
    name: str, engine: str, timeout: float, selection: str | None
) -> tuple[FileOutcomes, float]:
    """Every test of ``tests/trainer/{name}.py`` under ``engine``, and the seconds it took."""
    log = CACHE / "logs" / f"{engine}-{name.replace('/', '-')}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    env = environment(engine)
    env["TRAINER_CONFORMANCE_LOG"] = str(log)
    output = log.with_suffix(".out")
    began = time.monotonic()
    with output.open("w") as out:
        proc = subprocess.Popen(
            command(engine, f"tests/trainer/{name}.py", selection),
            cwd=source_folder(CACHE),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a hung file ends whole
        )
        if not wait_running(proc, timeout):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    found = read_log(log)
    if not found.outcomes:
        found.outcomes["<collect>"] = "error"
        found.messages["<collect>"] = f"no test reported; see {output.relative_to(REPO)}"
    return found, time.monotonic() - began


def wait_running(proc: subprocess.Popen[bytes], limit: float) -> bool:
    """Wait for ``proc``; False once it has run ``limit`` seconds. Time it spends stopped
    (SIGSTOP, as a shared host pauses helpers' jobs while CI runs) does not count, nor does
    time this runner itself was stopped: each check adds at most two check intervals."""
    ran, last = 0.0, time.monotonic()
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return True
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if not _stopped(proc.pid):
                ran += min(now - last, 2 * POLL_S)
            last = now
            if ran > limit:
                return False


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (Linux: its state in /proc; elsewhere never)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("T", "t")


def run(names: list[str], timeout: float, selection: str | None) -> dict[str, Any]:
    """Run ``names`` under both engines; the updated results (also written to disk)."""
    results_path = CACHE / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    for name in names:
        entry: dict[str, Any] = {"selection": selection, "messages": {}, "seconds": {}}
        for engine in ENGINES:
            found, seconds = run_file(name, engine, timeout, selection)
            entry[engine] = found.outcomes
            entry["messages"][engine] = found.messages
            entry["seconds"][engine] = round(seconds, 1)
        results[name] = entry
        theirs, ours = passing(entry["accelerate"]), passing(entry["overdrive"])
        print(
            f"{name}: {len(theirs)} pass under Hugging Face Accelerate, {len(theirs & ours)} of "
            f"them under overdrive ({len(ours - theirs)} under overdrive only)",
            flush=True,
        )
        results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default=",".join(DEFAULT_FILES), help="comma-separated")
    parser.add_argument("-k", dest="selection", default=None, help="pytest -k for every file")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per file")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    if not (SITE / "accelerate").is_dir():
        raise SystemExit(
            f"error: Hugging Face Accelerate is not installed in {SITE}\n"
            "  fix: run `make trainer` (it installs it there)"
        )
    if not is_fetched(CACHE):
        fetch(CACHE)
    source = source_folder(CACHE)
    if not (source / "SOURCE.json").is_file():
        raise SystemExit(f"error: {source} has no SOURCE.json saying where its tests came from")
    if "tag" not in json.loads((source / "SOURCE.json").read_text()) and check(source):
        raise SystemExit(f"error: seeded files differ from their record: {check(source)}")
    (source / "pytest.ini").write_text("[pytest]\n")  # not this repository's settings
    results = run(args.files.split(","), args.timeout, args.selection)
    if args.write_docs:
        write_table(results, REPO / "docs" / "trainer.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
