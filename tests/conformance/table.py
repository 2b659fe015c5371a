"""The conformance table in docs/migrating.md, between its two marker lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.markers import write_between

START = "<!-- conformance:start -->"
END = "<!-- conformance:end -->"


def table(results: dict[str, dict[str, dict[str, str]]]) -> str:
    """One row per file: tests that pass under Hugging Face Accelerate, and how many of those
    pass under overdrive; the total and its share."""
    lines = [
        "| file | tests | pass under Hugging Face Accelerate | of those, pass under overdrive |"
        " also pass under overdrive only | skipped or hung here |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    total_theirs = total_both = 0
    for name in sorted(results):
        theirs, ours = results[name]["accelerate"], results[name]["overdrive"]
        passing = {t for t, o in theirs.items() if o == "passed"}
        both = {t for t in passing if ours.get(t) == "passed"}
        only_ours = {t for t, o in ours.items() if o == "passed" and t not in passing}
        other = {t for t, o in {**theirs, **ours}.items() if o in ("skipped", "hung")}
        total_theirs, total_both = total_theirs + len(passing), total_both + len(both)
        tests = len(set(theirs) | set(ours))
        lines.append(
            f"| test_{name}.py | {tests} | {len(passing)} | {len(both)} | {len(only_ours)} "
            f"| {len(other)} |"
        )
    share = f"{100 * total_both / total_theirs:.0f}%" if total_theirs else "-"
    lines.append(f"| **all** | | **{total_theirs}** | **{total_both}** ({share}) | | |")
    return "\n".join(lines)


def write_table(results: dict[str, Any], doc: Path) -> None:
    """Replace the text between the markers in ``doc`` (appended with them when absent)."""
    write_between(doc, START, END, table(results))
