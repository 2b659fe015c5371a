"""``make differential``: generated programs under Hugging Face Accelerate and overdrive.

    python -m tests.differential.run --count 250 --nprocs 1 2 [--start 0] [--keep]

Prints each divergent program (its choices that differ from the smallest program, and the
first number that differs), then the count of programs run and of divergences. ``--keep``
shrinks each divergent program to a minimal one and writes it to ``regressions/``, where
``test_differential.py`` runs it in ``make test``. Exits 1 on any divergence.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.differential import grammar, runner

REGRESSIONS = Path(__file__).resolve().parent / "regressions"


def programs_for(start: int, count: int, nprocs: int) -> list[dict[str, Any]]:
    return [dict(grammar.generate(s, nprocs), id=s) for s in range(start, start + count)]


def diverges(program: dict[str, Any], nprocs: int) -> bool:
    results = runner.run_all([program], nprocs)
    return bool(runner.differences(results, int(program["id"])))


def keep(program: dict[str, Any], nprocs: int) -> Path:
    """Shrink a divergent program and write it as a regression case."""
    small = grammar.shrink(program, lambda p: diverges(p, nprocs))
    REGRESSIONS.mkdir(exist_ok=True)
    path = REGRESSIONS / f"np{nprocs}_program_{program['id']}.json"
    path.write_text(json.dumps({"nprocs": nprocs, "program": small}, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=250, help="programs per world size")
    parser.add_argument("--start", type=int, default=0, help="first program number")
    parser.add_argument("--nprocs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=50, help="programs per engine launch")
    parser.add_argument("--keep", action="store_true", help="shrink and keep divergences")
    args = parser.parse_args(argv)
    total = divergent = refused = faults = 0
    began = time.monotonic()
    for nprocs in args.nprocs:
        for first in range(args.start, args.start + args.count, args.batch):
            size = min(args.batch, args.start + args.count - first)
            programs = programs_for(first, size, nprocs)
            results = runner.run_all(programs, nprocs)
            for p in programs:
                total += 1
                refused += bool(runner.errors(results["accelerate"][int(p["id"])]))
                fault = runner.accelerate_fault(results, int(p["id"]))
                if fault:
                    faults += 1
                    print(f"[{nprocs} process(es)] program {p['id']}: Accelerate fails ({fault})")
                found = runner.differences(results, int(p["id"]))
                if not found:
                    continue
                divergent += 1
                choices = {k: v for k, v in p.items() if grammar.DEFAULTS.get(k) != v}
                print(f"[{nprocs} process(es)] program {p['id']}: {json.dumps(choices)}")
                for line in found:
                    print(f"    {line[:500]}")
                if args.keep:
                    print(f"    kept as {keep(p, nprocs)}")
            print(
                f"... {total} programs, {divergent} divergent ({time.monotonic() - began:.0f} s)",
                flush=True,
            )
    print(
        f"differential: {total} programs run, {divergent} divergent ({refused} ended in an "
        f"error under Hugging Face Accelerate, compared by its kind; {faults} of them a known "
        "failure of Hugging Face Accelerate itself that overdrive runs through)"
    )
    return 1 if divergent else 0


if __name__ == "__main__":
    sys.exit(main())
