"""overdrive's notes (issue 41): said only when verbose, each once per output folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.config import load_settings
from overdrive.setup import notes
from tests.helpers.dist import clean_env


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notes, "_SHOWN", set())
    monkeypatch.delenv("OVERDRIVE_VERBOSE", raising=False)


def _verbose(on: bool) -> object:
    return load_settings(flags={"verbose": on}, flag_names={"verbose": "verbose"})


def test_a_note_is_silent_unless_verbose(capfd: pytest.CaptureFixture[str]) -> None:
    notes.note(_verbose(False), "k", "a note")
    assert capfd.readouterr().err == ""
    notes.note(_verbose(True), "k", "a note")
    assert capfd.readouterr().err == "overdrive: a note\n"


def test_a_note_is_said_once_per_output_folder_across_processes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, run, other = _verbose(True), tmp_path / "run", tmp_path / "other"
    run.mkdir()
    other.mkdir()
    notes.note(settings, "k", "first", str(run))
    notes.note(settings, "k", "again", str(run))
    monkeypatch.setattr(notes, "_SHOWN", set())  # a later process, same folder
    notes.note(settings, "k", "resumed", str(run))
    notes.note(settings, "k", "elsewhere", str(other))
    assert capfd.readouterr().err == "overdrive: first\noverdrive: elsewhere\n"
    assert (run / notes.NOTES_FILE).is_file()


def test_without_a_folder_a_note_is_said_once_per_process(
    capfd: pytest.CaptureFixture[str],
) -> None:
    for _ in range(3):
        notes.note(_verbose(True), "k", "once", None)
    assert capfd.readouterr().err == "overdrive: once\n"


def test_overdrive_run_says_the_settings_only_at_verbose(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("from overdrive import Accelerator\nAccelerator(cpu=True)\nprint('ok')\n")
    runs = {
        flag: subprocess.run(
            [sys.executable, "-m", "overdrive.run", *flag, str(script)],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        for flag in ((), ("--verbose",))
    }
    quiet, verbose = runs[()], runs[("--verbose",)]
    assert quiet.returncode == 0 and verbose.returncode == 0, verbose.stderr
    assert quiet.stdout == verbose.stdout == "ok\n"
    assert quiet.stderr == ""
    assert verbose.stderr == (
        "overdrive: effective settings (rank 0 of 1): use_cpu=true (code Accelerator(cpu=...)), "
        "verbose=true (env OVERDRIVE_VERBOSE)\n"
    )
