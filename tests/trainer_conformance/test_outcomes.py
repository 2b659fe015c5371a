"""The Trainer conformance runner's own parts: outcomes from the plugin's log, the docs table."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trainer_conformance.outcomes import node_key, read_log
from tests.trainer_conformance.table import regressions, table, write_table

NODE = "tests/trainer/test_x.py::Case::test_a"


def _log(tmp_path: Path, *records: dict[str, str]) -> Path:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_keys_drop_the_file() -> None:
    assert node_key(NODE) == "Case::test_a"
    assert node_key("tests/trainer/test_x.py::test_b") == "::test_b"
    assert node_key("tests/trainer/test_x.py") == "<collect>"


def test_a_failed_setup_is_an_error_and_a_skip_a_skip(tmp_path: Path) -> None:
    other = NODE.replace("test_a", "test_b")
    log = _log(
        tmp_path,
        {"test": NODE, "when": "setup", "outcome": "failed", "message": "boom"},
        {"test": NODE, "when": "teardown", "outcome": "passed"},
        {"test": other, "when": "setup", "outcome": "skipped", "message": "needs a GPU"},
    )
    found = read_log(log)
    assert found.outcomes == {"Case::test_a": "error", "Case::test_b": "skipped"}
    assert found.messages["Case::test_a"] == "boom"


def test_a_test_that_started_and_never_reported_hung(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        {"test": NODE, "when": "start", "outcome": "started"},
        {"test": NODE, "when": "setup", "outcome": "passed"},
    )
    assert read_log(log).outcomes == {"Case::test_a": "hung"}


def test_a_passing_call_with_a_failing_teardown_is_an_error(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        {"test": NODE, "when": "setup", "outcome": "passed"},
        {"test": NODE, "when": "call", "outcome": "passed"},
        {"test": NODE, "when": "teardown", "outcome": "failed", "message": "leak"},
    )
    assert read_log(log).outcomes == {"Case::test_a": "error"}


RESULTS = {
    "test_x": {
        "accelerate": {"C::a": "passed", "C::b": "passed", "C::c": "skipped", "C::d": "failed"},
        "overdrive": {"C::a": "passed", "C::b": "failed", "C::c": "skipped", "C::d": "failed"},
        "messages": {"overdrive": {"C::b": "AssertionError: 1 != 2\n  more"}},
        "selection": None,
    }
}


def test_the_table_counts_and_names_what_overdrive_does_not_pass() -> None:
    assert regressions(RESULTS) == [("test_x", "C::b", "failed: AssertionError: 1 != 2 more")]
    text = table(RESULTS)
    assert "| test_x.py | 4 | 2 | 1 | 0 | 1 | 1 | 0 |" in text
    assert "| **all** | | **2** | **1** (50%) | | | | |" in text
    assert "- `test_x.py::C::b`: failed: AssertionError: 1 != 2 more" in text


def test_the_table_goes_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "head\n<!-- trainer-conformance:start -->\nold\n<!-- trainer-conformance:end -->\ntail\n"
    )
    write_table(RESULTS, doc)
    text = doc.read_text()
    assert text.startswith("head\n<!-- trainer-conformance:start -->\n| file |")
    assert "old" not in text and text.endswith("<!-- trainer-conformance:end -->\ntail\n")


def test_a_file_that_did_not_collect_says_so() -> None:
    failed = {"<collect>": "error"}
    results = {"test_y": {"accelerate": failed, "overdrive": failed, "messages": {}}}
    assert "| test_y.py | 0 (did not collect) | 0 | 0 | 0 | 1 | 0 | 0 |" in table(results)
