"""One outcome per test from the plugin's log lines (``plugin/trainer_conformance_log.py``).

A test passes when its call passed and neither its setup nor its teardown failed; a failed
setup or teardown is an ``error``; a skip at any stage is ``skipped``; a test that started and
never reported (the file was ended for taking too long) is ``hung``. A file that did not
collect is one entry, ``<collect>``, with the outcome ``error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

FINAL = ("passed", "failed", "skipped", "error", "xfailed", "xpassed", "hung")


@dataclass
class FileOutcomes:
    """Each test's outcome (``Class::test``) and, where it did not pass, the first message."""

    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)


def node_key(nodeid: str) -> str:
    """``Class::test`` (or ``::test`` for a function) from a pytest node id."""
    parts = nodeid.split("::")
    if len(parts) == 1:
        return "<collect>"
    return "::".join(parts[1:]) if len(parts) > 2 else f"::{parts[1]}"


def _combine(stages: dict[str, str]) -> str:
    if "started" in stages.values() and len(stages) == 1:
        return "hung"
    setup, call, teardown = (stages.get(w) for w in ("setup", "call", "teardown"))
    if "skipped" in (setup, call):
        return "skipped"
    if setup == "failed" or teardown == "failed":
        return "error"
    if call is None:
        return "hung"
    return call


def read_log(path: Path) -> FileOutcomes:
    """The outcomes the log at ``path`` records (empty when the run wrote nothing)."""
    stages: dict[str, dict[str, str]] = {}
    result = FileOutcomes()
    if not path.is_file():
        return result
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        key = node_key(record["test"])
        if record["when"] == "collect":
            result.outcomes[key] = "error"
        else:
            stages.setdefault(key, {})[record["when"]] = record["outcome"]
        if "message" in record and key not in result.messages:
            result.messages[key] = record["message"]
    for key, seen in stages.items():
        result.outcomes[key] = _combine(seen)
    return result
