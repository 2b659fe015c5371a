"""Run generated programs under Hugging Face Accelerate and under overdrive, and compare.

Three engines run the same ``program.py`` on the same programs:

- ``accelerate``: the real package (the test-only install in ``.compat/site``), one plain
  process, or ``torchrun`` with ``ACCELERATE_USE_CPU=1`` for a world of 2 on this CPU host;
- ``overdrive as accelerate``: ``import accelerate`` answered by overdrive
  (``python -m overdrive.run`` / ``overdrive launch --cpu``);
- ``overdrive``: the same program importing ``overdrive``.

Every number a program logged must be equal, bitwise, under all three.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROGRAM = HERE / "program.py"
COMPAT_SITE = Path(os.environ.get("OVERDRIVE_COMPAT_SITE", REPO / ".compat" / "site"))
ENGINES = ("accelerate", "overdrive as accelerate", "overdrive")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(folder: Path, with_accelerate: bool) -> dict[str, str]:
    """The caller's environment without launcher, Accelerate or overdrive variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCELERATE_", "OVERDRIVE_", "TORCHELASTIC_"))
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PYTHONPATH")
    }
    env["XDG_CACHE_HOME"] = str(folder / "cache")  # no developer's default config file
    env["HF_HOME"] = str(folder / "hf")
    env["PYTHONPATH"] = str(COMPAT_SITE) if with_accelerate else ""
    env["OMP_NUM_THREADS"] = "1"
    return env


def command(engine: str, nprocs: int, programs: Path, root: Path) -> list[str]:
    lib = "overdrive" if engine == "overdrive" else "accelerate"
    tail = [str(PROGRAM), "--lib", lib, str(programs), "--root", str(root)]
    py = sys.executable
    if engine == "accelerate":
        if nprocs == 1:
            return [py, *tail]
        port = str(_free_port())
        return [py, "-m", "torch.distributed.run", "--nproc_per_node", str(nprocs),
                "--master_addr", "127.0.0.1", "--master_port", port, *tail]  # fmt: skip
    if nprocs == 1:
        return [py, "-m", "overdrive.run", *tail]
    return [py, "-m", "overdrive", "launch", "--cpu", "--num_processes", str(nprocs), *tail]


def run_engine(
    engine: str, programs: list[dict[str, Any]], nprocs: int, timeout: float = 1800
) -> dict[int, dict[str, Any]]:
    """Each program's result under ``engine`` (id -> result; a crash of the whole run gives
    every missing program an error result)."""
    with tempfile.TemporaryDirectory(prefix="differential-") as tmp:
        folder = Path(tmp)
        listing = folder / "programs.json"
        listing.write_text(json.dumps(programs))
        root = folder / "runs"
        root.mkdir()
        env = _env(folder, with_accelerate=engine == "accelerate")
        if engine == "accelerate" and nprocs > 1:
            env["ACCELERATE_USE_CPU"] = "1"
        done = subprocess.run(
            command(engine, nprocs, listing, root), cwd=REPO, env=env, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip
        results: dict[int, dict[str, Any]] = {int(p["id"]): {"ranks": {}} for p in programs}
        for written in sorted(root.glob("results_rank*.jsonl")):
            for line in written.read_text().splitlines():
                result = json.loads(line)
                results[int(result["id"])]["ranks"][str(result["rank"])] = result
    for result in results.values():
        for rank in range(nprocs):
            result["ranks"].setdefault(
                str(rank), {"error": "run ended", "detail": done.stderr[-1500:]}
            )
    return results


def outcome(result: dict[str, Any]) -> Any:
    """What is compared: every process's logged numbers, or the kind of its error."""
    return {
        rank: r.get("log", {"error": r.get("error")}) for rank, r in sorted(result["ranks"].items())
    }


def errors(result: dict[str, Any]) -> list[str]:
    """Each process's error and its last words, if it ended in one."""
    return [
        f"rank {rank}: {r['error']}: {r.get('detail', '')[-400:]}"
        for rank, r in sorted(result["ranks"].items())
        if "error" in r
    ]


# Failures of Hugging Face Accelerate itself where overdrive does what the script asks. Each
# is listed in docs/migrating.md ("Where Hugging Face Accelerate fails"); a program that meets
# one is counted apart, not as a divergence, when overdrive ran it without an error.
ACCELERATE_FAULTS = {
    # skip_first_batches skipping a whole epoch of a dispatch_batches loader: the dispatcher
    # broadcasts the batch it never read (None)
    "empty dispatched epoch": ("TypeError", "passed to `_gpu_broadcast_one`"),
}


def accelerate_fault(results: dict[str, dict[int, dict[str, Any]]], pid: int) -> str | None:
    """The known Hugging Face Accelerate failure program ``pid`` met, if overdrive ran it."""
    ranks = results["accelerate"][pid]["ranks"].values()
    for name, (kind, words) in ACCELERATE_FAULTS.items():
        met = any(r.get("error") == kind and words in r.get("detail", "") for r in ranks)
        ran = all(not errors(results[engine][pid]) for engine in ENGINES[1:])
        if met and ran:
            return name
    return None


def differences(results: dict[str, dict[int, dict[str, Any]]], pid: int) -> list[str]:
    """For program ``pid``: which engines differ from Accelerate, and where first."""
    if accelerate_fault(results, pid):
        return []
    reference = outcome(results["accelerate"][pid])
    out = []
    for engine in ENGINES[1:]:
        got = outcome(results[engine][pid])
        if got != reference:
            out.append(f"{engine}: {first_difference(reference, got)}")
    return out


def first_difference(a: Any, b: Any) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"{key}: {first_difference(a.get(key), b.get(key))}"
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"[{i}] {first_difference(x, y)}"
        if len(a) != len(b):
            return f"length {len(a)} vs {len(b)}"
    return f"accelerate {json.dumps(a)[:300]} vs {json.dumps(b)[:300]}"


def _ended_early(results: dict[int, dict[str, Any]]) -> bool:
    return any("run ended" in e for r in results.values() for e in errors(r))


def run_all(
    programs: list[dict[str, Any]], nprocs: int, engines: tuple[str, ...] = ENGINES
) -> dict[str, dict[int, dict[str, Any]]]:
    """Every engine's results; a launch that ended before its last program (a rendezvous
    that timed out on a loaded host) is run once more."""
    out = {}
    for engine in engines:
        results = run_engine(engine, programs, nprocs)
        if _ended_early(results):
            results = run_engine(engine, programs, nprocs)
        out[engine] = results
    return out
