"""The Trainer conformance table in docs/trainer.md, between its two marker lines.

``results`` maps a file (``test_trainer`` for ``tests/trainer/test_trainer.py``) to
``{"accelerate": {test: outcome}, "overdrive": {test: outcome}, "messages": {engine:
{test: message}}, "selection": "-k expression or null"}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.markers import write_between

START = "<!-- trainer-conformance:start -->"
END = "<!-- trainer-conformance:end -->"

Results = dict[str, dict[str, Any]]


def passing(outcomes: dict[str, str]) -> set[str]:
    """The tests that passed."""
    return {t for t, o in outcomes.items() if o == "passed"}


def regressions(results: Results) -> list[tuple[str, str, str]]:
    """(file, test, overdrive's outcome and message) for every test that passes under the
    Hugging Face Accelerate and not under overdrive."""
    found = []
    for name in sorted(results):
        theirs, ours = results[name]["accelerate"], results[name]["overdrive"]
        messages = results[name].get("messages", {}).get("overdrive", {})
        for test in sorted(passing(theirs) - passing(ours)):
            outcome = ours.get(test, "not run")
            message = " ".join(messages.get(test, "").split())[:200]
            found.append((name, test, f"{outcome}: {message}" if message else outcome))
    return found


def _row(name: str, entry: dict[str, Any]) -> tuple[str, int, int]:
    theirs, ours = entry["accelerate"], entry["overdrive"]
    both = passing(theirs) & passing(ours)
    only_ours = passing(ours) - passing(theirs)
    bad = ("failed", "error")
    failing = {t for t, o in theirs.items() if o in bad and ours.get(t) in bad}
    skipped = {t for t, o in theirs.items() if o in ("skipped", "xfailed")}
    hung = {t for t, o in {**theirs, **ours}.items() if o == "hung"}
    tests: int | str = len((set(theirs) | set(ours)) - {"<collect>"})
    if not tests and "<collect>" in theirs:
        tests = "0 (did not collect)"
    selection = f" (`-k {entry['selection']}`)" if entry.get("selection") else ""
    line = (
        f"| {name}.py{selection} | {tests} | {len(passing(theirs))} | {len(both)} "
        f"| {len(only_ours)} | {len(failing)} | {len(skipped)} | {len(hung)} |"
    )
    return line, len(passing(theirs)), len(both)


def table(results: Results) -> str:
    """One row per file, the total, then each test overdrive does not pass that Hugging Face
    Accelerate does, with overdrive's outcome and first message."""
    lines = [
        "| file | tests | pass under Hugging Face Accelerate | of those, pass under overdrive "
        "| pass under overdrive only | fail under both | skipped | hung |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    total_theirs = total_both = 0
    for name in sorted(results):
        line, theirs, both = _row(name, results[name])
        lines.append(line)
        total_theirs, total_both = total_theirs + theirs, total_both + both
    share = f"{100 * total_both / total_theirs:.0f}%" if total_theirs else "-"
    lines.append(f"| **all** | | **{total_theirs}** | **{total_both}** ({share}) | | | | |")
    found = regressions(results)
    if found:
        lines += ["", "Pass under Hugging Face Accelerate, not under overdrive:", ""]
        lines += [f"- `{name}.py::{test}`: {why}" for name, test, why in found]
    return "\n".join(lines)


def write_table(results: Results, doc: Path) -> None:
    """Replace the text between the markers in ``doc`` (appended with them when absent)."""
    write_between(doc, START, END, table(results))
