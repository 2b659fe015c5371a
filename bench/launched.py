"""Shared by the benchmarks: run a worker under ``overdrive launch`` and read its result."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def launch_result(nprocs: int, launch_flags: Sequence[str], worker: Sequence[str]) -> Any:
    """``overdrive launch --cpu`` of ``worker`` (script and arguments) on ``nprocs`` processes;
    the JSON of its last ``RESULT`` line. Exits with the output when the run fails."""
    cmd = [sys.executable, "-m", "overdrive", "launch", "--cpu", "-q", "--no_rank_prefix"]
    cmd += ["--num_processes", str(nprocs), *launch_flags, *worker]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1][len("RESULT ") :])


def repeated_times(
    repeats: int, nprocs: int, launch_flags: Sequence[str], worker: Sequence[str]
) -> dict[str, list[float]]:
    """Each implementation's step times over ``repeats`` launches of ``worker``."""
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, values in launch_result(nprocs, launch_flags, worker).items():
            times.setdefault(name, []).extend(values)
    return times


def alternate(
    impls: dict[str, Callable[[], None]],
    *,
    rounds: int,
    steps: int,
    barrier: Callable[[], None],
    warmup: int = 5,
) -> dict[str, list[float]]:
    """Per-step seconds of each implementation: ``warmup`` untimed steps each, then ``rounds``
    rounds in which each one times a block of ``steps`` steps, the order reversed every other
    round, so a slow phase of a shared machine hits all of them. ``barrier`` lines the
    processes up before each timed step."""
    for _ in range(warmup):
        for run in impls.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in impls}
    for r in range(rounds):
        order = list(impls) if r % 2 == 0 else list(reversed(impls))
        for name in order:
            for _ in range(steps):
                barrier()
                start = time.perf_counter()
                impls[name]()
                times[name].append(time.perf_counter() - start)
    return times


def report_alternating(
    acc: Any, impls: dict[str, Callable[[], None]], *, rounds: int, steps: int
) -> None:
    """In a launched worker: time ``impls`` with ``alternate`` (lined up by ``acc``'s barrier)
    and print the step times as ``RESULT {json}`` on the main process, for
    ``launch_result`` to read."""
    times = alternate(impls, rounds=rounds, steps=steps, barrier=acc.wait_for_everyone)
    if acc.is_main_process:
        print("RESULT " + json.dumps(times), flush=True)


def ratio_table(times: dict[str, list[float]], base: str = "raw") -> str:
    """Median and p10 step times of each implementation, with their ratio to ``base``."""
    base_med = statistics.median(times[base])
    base_p10 = statistics.quantiles(times[base], n=10)[0]
    lines = [
        "| implementation | median step (ms) | ratio | p10 step (ms) | ratio | steps |",
        "|---|---|---|---|---|---|",
    ]
    for name, values in times.items():
        med, p10 = statistics.median(values), statistics.quantiles(values, n=10)[0]
        lines.append(
            f"| {name} | {med * 1e3:.3f} | {med / base_med:.3f}x | {p10 * 1e3:.3f} | "
            f"{p10 / base_p10:.3f}x | {len(values)} |"
        )
    return "\n".join(lines)
