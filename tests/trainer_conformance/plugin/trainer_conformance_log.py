"""A pytest plugin that writes each test's outcome the moment pytest reports it.

Loaded with ``-p trainer_conformance_log`` (its folder on ``PYTHONPATH``); the file named by
``TRAINER_CONFORMANCE_LOG`` gets one JSON line per report, so a run that is ended for taking
too long still leaves every outcome it reached, and names the test it was in.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get("TRAINER_CONFORMANCE_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:500]
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[-1])[:500]
    return str(report.longrepr or "")[:500]


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _write({"test": nodeid, "when": "start", "outcome": "started"})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    record = {"test": report.nodeid, "when": report.when, "outcome": outcome}
    if outcome not in ("passed", "xpassed"):
        record["message"] = _message(report)
    _write(record)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write(
            {
                "test": report.nodeid,
                "when": "collect",
                "outcome": "failed",
                "message": _message(report),
            }
        )
