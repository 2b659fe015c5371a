"""Run Hugging Face Accelerate's unit tests against it and, renamed, against overdrive.

    python -m tests.conformance.run [--files accelerator,cli,...] [--write-docs]

Downloads its tests (``fetch.py``), ports them with the mechanical rename (``rename.py``)
into ``.conformance/ported``, runs each file under pytest twice (the original against the
Hugging Face Accelerate installed in ``.compat/site``, a test-only folder never on overdrive's
path; the ported copy against overdrive), and records every test's outcome in
``.conformance/results.json``. ``--write-docs`` puts the per-file table into
docs/migrating.md. A file that runs past ``--timeout`` seconds is recorded as hung.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conformance.fetch import add_data_files, fetch
from tests.conformance.rename import port_tree
from tests.conformance.table import write_table

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".conformance"
SITE = REPO / ".compat" / "site"
# The training side of its suite (TPU and fp8 hardware are not ours).
TRAINING = [
    "accelerator",
    "cli",
    "cpu",
    "data_loader",
    "dataclasses",
    "grad_sync",
    "kwargs_handlers",
    "launch",
    "logging",
    "memory_utils",
    "optimizer",
    "sagemaker",
    "scheduler",
    "state_checkpointing",
    "tracking",
    "utils",
]
# Big-model inference (empty init, device maps, CPU and disk offload), where it runs on a CPU.
BIG_MODEL = ["big_modeling", "hooks", "modeling_utils", "offload"]


def _env(engine: str) -> dict[str, str]:
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ACCELERATE_", "OVERDRIVE_", "PYTHONPATH"))
    }
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", XDG_CACHE_HOME=str(CACHE / "xdg"))
    env["HF_HOME"] = str(CACHE / "hf")
    # Its MLflow tests log to file:// stores, which MLflow 3.x refuses unless allowed.
    env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    deps = str(CACHE / "deps")  # its test dependencies (parameterized), for both runs
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), deps] if engine == "accelerate" else [deps])
    # The tests run each engine's command by name: overdrive's from the virtualenv, the
    # Hugging Face Accelerate's through a shim (its package sits in a folder, not installed).
    commands = [str(_command_shim())] if engine == "accelerate" else []
    env["PATH"] = os.pathsep.join([*commands, str(Path(sys.executable).parent), env["PATH"]])
    return env


def _command_shim() -> Path:
    """A folder holding an ``accelerate`` command that runs Hugging Face Accelerate's CLI."""
    folder = CACHE / "bin"
    shim = folder / "accelerate"
    if not shim.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        module = "accelerate.commands.accelerate_cli"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        shim.chmod(0o755)
    return folder


def run_file(folder: Path, name: str, engine: str, timeout: float) -> dict[str, str]:
    """Every test of ``folder/test_{name}.py``: its outcome (passed, failed, skipped, error,
    or hung for all of them when the file ran past ``timeout``)."""
    report = CACHE / "reports" / f"{engine}-{name}.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    # From the folder above tests/, as its CI runs them (they name "tests/test_configs/...").
    target = f"{folder.name}/test_{name}.py"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target]
    cmd += [f"--junitxml={report}", "-o", "junit_family=xunit2"]
    try:
        subprocess.run(
            cmd,
            cwd=folder.parent,
            env=_env(engine),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"<file>": "hung"}
    if not report.is_file():
        return {"<file>": "error"}
    return _outcomes(report)


def _outcomes(report: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            outcomes[test] = "failed"
        elif "error" in kinds:
            outcomes[test] = "error"
        elif "skipped" in kinds:
            outcomes[test] = "skipped"
        else:
            outcomes[test] = "passed"
    return outcomes or {"<file>": "no tests"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files", default=",".join(TRAINING + BIG_MODEL), help="comma-separated names"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per file")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    if not (SITE / "accelerate").is_dir():
        raise SystemExit(
            f"error: Hugging Face Accelerate is not installed in {SITE}\n"
            "  fix: run `make conformance` (it installs it there)"
        )
    source = fetch(CACHE)
    add_data_files(source)
    original = source / "tests"
    ported = CACHE / "ported" / "tests"
    port_tree(original, ported)
    for root in (original.parent, ported.parent):  # not this repository's pytest settings
        (root / "pytest.ini").write_text("[pytest]\n")
    results_path = CACHE / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    for name in args.files.split(","):
        theirs = run_file(original, name, "accelerate", args.timeout)
        ours = run_file(ported, name, "overdrive", args.timeout)
        results[name] = {"accelerate": theirs, "overdrive": ours}
        both = sum(1 for t, o in theirs.items() if o == "passed" and ours.get(t) == "passed")
        print(
            f"{name}: {sum(v == 'passed' for v in theirs.values())} pass under Hugging Face "
            f"Accelerate, {both} of them under overdrive",
            flush=True,
        )
        results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.write_docs:
        write_table(results, REPO / "docs" / "migrating.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
