"""Run a test script of Hugging Face Accelerate to the end, one outcome per test call.

``run_script`` starts ``runner.py`` on every rank with the chosen launcher, reads the
outcomes, and starts it again past a call that hung or killed a rank, until ``main()``
ends. Launchers: ``overdrive`` (``overdrive launch --cpu``), ``torchrun`` (for Hugging Face
Accelerate itself, with ``ACCELERATE_USE_CPU=1``, the only way it forms a gloo group on a CPU
host) and ``python`` (one plain process).

    python tests/compat/harness.py SCRIPT --launcher overdrive --nprocs 2 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUNNER = HERE / "runner.py"


@dataclass
class ScriptResult:
    """Outcome of every test call of one script: ``pass``, ``fail`` or ``hang``."""

    script: str
    launcher: str
    nprocs: int
    calls: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    launches: int = 0

    def count(self, status: str) -> int:
        return sum(1 for s in self.calls.values() if s == status)

    def as_dict(self) -> dict[str, object]:
        return {
            "script": self.script,
            "launcher": self.launcher,
            "nprocs": self.nprocs,
            "calls": self.calls,
            "errors": self.errors,
            "launches": self.launches,
        }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(launcher: str, nprocs: int, script: Path, results: Path) -> list[str]:
    target = [str(RUNNER), str(script), str(results)]
    if launcher == "overdrive":
        return [
            sys.executable,
            "-m",
            "overdrive",
            "launch",
            "--cpu",
            "--num_processes",
            str(nprocs),
            "--main_process_port",
            str(free_port()),
            *target,
        ]
    if launcher == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(nprocs),
            "--master_port",
            str(free_port()),
            *target,
        ]
    if launcher == "python":
        return [sys.executable, *target]
    raise ValueError(f"unknown launcher {launcher!r}: use overdrive, torchrun or python")


def environment(launcher: str, site: Path | None, call_timeout: float) -> dict[str, str]:
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ACCELERATE_", "OVERDRIVE_", "TORCHELASTIC_"))
    }
    env.update(
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        XDG_CACHE_HOME=tempfile.mkdtemp(prefix="compat-cache-"),  # no user config file
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        COMPAT_CALL_TIMEOUT=str(call_timeout),
    )
    paths = [str(REPO / "src")]
    if launcher == "torchrun":
        env["ACCELERATE_USE_CPU"] = "1"
        paths = []
    if site is not None:
        paths.append(str(site))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def read_events(results: Path, nprocs: int) -> list[list[dict[str, object]]]:
    per_rank = []
    for rank in range(nprocs):
        path = results / f"rank{rank}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        per_rank.append([json.loads(line) for line in lines if line.strip()])
    return per_rank


def merge(per_rank: list[list[dict[str, object]]], result: ScriptResult) -> tuple[bool, bool]:
    """Fold one launch's events into ``result``; return (made progress, main() ended)."""
    keys: list[str] = []
    status: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for events in per_rank:
        for event in events:
            key, state = str(event["key"]), str(event["status"])
            if key not in keys:
                keys.append(key)
            if state == "start":
                status.setdefault(key, [])
                continue
            status.setdefault(key, []).append(state)
            if state != "pass" and "error" in event:
                errors.setdefault(key, str(event["error"]))
    progress, ended = False, False
    nprocs = len(per_rank)
    for key in keys:
        states = status.get(key, [])
        if key == "<end>":
            ended = len(states) == nprocs
            continue
        if key in result.calls:
            continue
        if "fail" in states:
            outcome = "fail"
        elif len(states) == nprocs and all(s == "pass" for s in states):
            outcome = "pass"
        else:
            outcome = "hang"  # a rank never finished it (or lost its peer)
        result.calls[key] = outcome
        if key in errors:
            result.errors[key] = errors[key]
        elif outcome == "hang":
            result.errors[key] = "did not finish on every rank within the call timeout"
        progress = True
        if key in ("<import>", "<main>"):
            ended = True
    return progress, ended


def run_script(
    script: Path,
    *,
    launcher: str,
    nprocs: int,
    site: Path | None = None,
    extra_env: dict[str, str] | None = None,
    call_timeout: float = 90,
    launch_timeout: float = 900,
    max_launches: int = 12,
) -> ScriptResult:
    """Every test call's outcome for ``script`` run on ``nprocs`` processes."""
    result = ScriptResult(script.name, launcher, nprocs)
    env = environment(launcher, site, call_timeout)
    env.update(extra_env or {})
    for _ in range(max_launches):
        with tempfile.TemporaryDirectory(prefix="compat-") as tmp:
            results = Path(tmp)
            # Calls that passed run again (later calls may need what they return); the ones
            # that failed or hung are skipped.
            skip = [k for k, v in result.calls.items() if v != "pass"]
            env["COMPAT_SKIP"] = json.dumps(sorted(skip))
            cmd = command(launcher, nprocs, script, results)
            result.launches += 1
            try:
                proc = subprocess.run(
                    cmd,
                    env=env,
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    timeout=launch_timeout,
                )
                tail = (proc.stdout + proc.stderr)[-2000:]
            except subprocess.TimeoutExpired:
                tail = "launch timed out"
            progress, ended = merge(read_events(results, nprocs), result)
        if ended or not progress:
            if not progress and not ended:
                result.calls["<launch>"] = "fail"
                result.errors["<launch>"] = tail
            break
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("--launcher", default="overdrive")
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--site", type=Path, default=None)
    parser.add_argument("--call-timeout", type=float, default=90)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the workers")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)
    result = run_script(
        args.script.resolve(),
        launcher=args.launcher,
        nprocs=args.nprocs,
        site=args.site.resolve() if args.site else None,
        call_timeout=args.call_timeout,
        extra_env=extra,
    )
    for key, outcome in result.calls.items():
        error = f"  {result.errors[key]}" if key in result.errors else ""
        print(f"{outcome:5} {key}{error}")
    print(f"{result.count('pass')} passed, {result.count('fail') + result.count('hang')} failed")
    if args.json:
        args.json.write_text(json.dumps(result.as_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
