"""The examples table in docs/migrating.md, between its two marker lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.examples.reasons import reason_for
from tests.helpers.markers import write_between

START = "<!-- examples:start -->"
END = "<!-- examples:end -->"


def _ran(run: dict[str, Any]) -> str:
    return "yes" if run.get("ok") else "no"


def _same(row: dict[str, Any]) -> str:
    diff = row.get("max_abs_diff")
    if not (row["accelerate"].get("ok") and row["overdrive"].get("ok")):
        return "-"
    if diff is None:
        return f"no ({row.get('note', 'not comparable')})"
    return "yes (bitwise)" if row.get("bitwise") else f"no ({diff:.1e})"


def _differs(row: dict[str, Any]) -> bool:
    runs = (row["accelerate"], row["overdrive"])
    return not all(r.get("ok") for r in runs) or not row.get("bitwise")


def _reason(row: dict[str, Any]) -> str:
    """The recorded explanation of a row that differs, else what the runs said."""
    text = reason_for(row["name"], row["processes"])
    resumed = [
        f"{label} resumed run vs its uninterrupted one: {_diff(row[e])}"
        for e, label in (("accelerate", "Hugging Face Accelerate's"), ("overdrive", "overdrive's"))
        if "resumed_vs_uninterrupted" in row[e]
    ]
    if not text and _differs(row):
        errors = [
            f"{e}: {row[e]['error']}" for e in ("accelerate", "overdrive") if "error" in row[e]
        ]
        text = "; ".join(errors) or "not explained yet"
    return "; ".join(t for t in [text, *resumed] if t).replace("|", "\\|")


def _diff(run: dict[str, Any]) -> str:
    value = run["resumed_vs_uninterrupted"]
    return "not comparable" if value is None else ("equal" if value == 0 else f"{value:.1e}")


def table(results: dict[str, dict[str, Any]]) -> str:
    """One row per example, flags and process count; the totals last."""
    lines = [
        "| example | flags | processes | runs under Hugging Face Accelerate | runs under overdrive"
        " | same weights (max abs diff) | reason |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = sorted(results.values(), key=lambda r: (r["name"], r["processes"]))
    for row in rows:
        example = row["example"].rsplit("/", 1)[-1]
        flags = row["name"].split(" ", 1)[1] if " " in row["name"] else ""
        lines.append(
            f"| {example} | {flags.replace('|', '/')} | {row['processes']} "
            f"| {_ran(row['accelerate'])} | {_ran(row['overdrive'])} | {_same(row)} "
            f"| {_reason(row)} |"
        )
    both = [r for r in rows if r["accelerate"].get("ok") and r["overdrive"].get("ok")]
    same = sum(1 for r in both if r.get("bitwise"))
    lines.append(
        f"| **all** | | | **{sum(1 for r in rows if r['accelerate'].get('ok'))}** of {len(rows)} "
        f"| **{sum(1 for r in rows if r['overdrive'].get('ok'))}** of {len(rows)} "
        f"| **{same}** of the {len(both)} that run under both | |"
    )
    return "\n".join(lines)


def write_table(results: dict[str, Any], doc: Path) -> None:
    """Replace the text between the markers in ``doc`` (appended with them when absent)."""
    write_between(doc, START, END, table(results))
