"""Hugging Face Accelerate's public surface held against overdrive's.

    python -m tests.surface.run [--write-docs] [--show-missing]

Dumps the pinned Accelerate's surface (``dump.py``, run under the test-only folder ``make
compat`` installs, cached beside it), compares it with overdrive's (``compare.py``), prints
``N of M names`` and every gap; ``--write-docs`` puts the count and the list of names left
out on purpose (``on_purpose.py``) into docs/migrating.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.markers import write_between
from tests.surface.compare import Report, compare
from tests.surface.on_purpose import ON_PURPOSE

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / ".compat" / "site"
VERSION = "1.15.0"  # the Makefile's COMPAT_VERSION
DOC = REPO / "docs" / "migrating.md"
START = "<!-- surface:start -->"
END = "<!-- surface:end -->"


def surface() -> dict[str, Any]:
    """Accelerate's surface, dumped once per version into ``.compat/``."""
    cache = REPO / ".compat" / f"surface-{VERSION}.json"
    if not cache.is_file():
        if not (SITE / "accelerate").is_dir():
            raise SystemExit(
                f"error: Hugging Face Accelerate {VERSION} is not installed in {SITE}\n"
                "  fix: run `make compat-site` (make test does it first)"
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
        env["PYTHONPATH"] = os.pathsep.join([str(SITE), str(REPO)])
        env["CUDA_VISIBLE_DEVICES"] = ""
        subprocess.run(
            [sys.executable, "-m", "tests.surface.dump", str(cache)],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
        )
    return json.loads(cache.read_text())


def report() -> Report:
    """The comparison against the on-purpose list."""
    return compare(surface(), ON_PURPOSE)


def docs_block(found: Report) -> str:
    """The count and the names left out on purpose, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for dotted, reason in sorted(found.on_purpose.items()):
        by_reason.setdefault(reason, []).append(dotted)
    lines = [
        f"**{len(found.present)} of {found.total} names** of Hugging Face Accelerate {VERSION}'s "
        f"public modules are at the same dotted path under overdrive with a compatible call "
        f"signature; the other {len(found.on_purpose)} are left out on purpose, for these "
        "reasons (`tests/surface/on_purpose.py`):",
        "",
        "| left out | names |",
        "| --- | --- |",
    ]
    for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(f"`{n}`" for n in names[:6])
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        lines.append(f"| {reason} | {len(names)}: {shown}{more} |")
    if found.missing or found.incompatible:
        lines += ["", f"Gaps not yet closed: {len(found.missing) + len(found.incompatible)}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--show-missing", action="store_true")
    args = parser.parse_args(argv)
    found = report()
    print(
        f"{len(found.present)} of {found.total} names present; {len(found.on_purpose)} left out "
        f"on purpose; {len(found.missing)} missing; {len(found.incompatible)} incompatible"
    )
    if args.show_missing:
        for dotted, why in {**found.missing, **found.incompatible}.items():
            print(f"  {dotted}: {why}")
    if args.write_docs:
        write_between(DOC, START, END, docs_block(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
