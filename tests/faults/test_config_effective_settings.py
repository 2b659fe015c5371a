"""The effective settings, code included (issue 13, item 10): the launcher's banner can only
know the file, environment and flags; once the Accelerator exists, rank 0 says what is in
force and where each value came from, and trackers record the same. Since issue 41 that is said
only when asked (``--verbose``, ``OVERDRIVE_VERBOSE=1``): a run that works prints nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from overdrive.accelerator import Accelerator
from tests.helpers.dist import run_launch
from tests.helpers.env import forget_launcher

SCRIPT = """\
from overdrive.accelerator import Accelerator

accelerator = Accelerator(mixed_precision="bf16")
print(f"rank {accelerator.process_index} ready", flush=True)
"""


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path / "cache")


@pytest.fixture
def verbose(monkeypatch: pytest.MonkeyPatch, no_launcher: None) -> None:
    monkeypatch.setenv("OVERDRIVE_VERBOSE", "1")


def _effective_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "effective settings" in line]


def _said(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> list[str]:
    """What reached the user: stderr, or the application's logging when an earlier test left
    the ``overdrive`` loggers enabled (then the report goes through logging instead)."""
    return _effective_lines(capfd.readouterr().err + "\n" + "\n".join(caplog.messages))


@pytest.mark.distributed
def test_rank_0_prints_the_settings_the_code_set(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = run_launch(script, nprocs=2, launch_args=["--verbose"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ready") == 2
    banner = next(line for line in done.stderr.splitlines() if line.startswith("overdrive launch:"))
    assert "mixed precision no (default" in banner  # the launcher cannot see the code
    lines = _effective_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]  # rank 0 only, once
    assert "mixed_precision=bf16 (code Accelerator(mixed_precision=...))" in lines[0]
    assert "use_cpu=true (flag --cpu)" in lines[0]
    assert "num_processes=2 (flag --num_processes)" in lines[0]
    assert "verbose=true (flag --verbose)" in lines[0]  # handed over, with its source
    assert "rdzv_backend" not in lines[0]  # defaults are not listed


@pytest.mark.usefixtures("no_launcher")
def test_nothing_is_printed_when_nothing_is_set(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    Accelerator()
    assert _said(capfd, caplog) == []


@pytest.mark.usefixtures("no_launcher")
def test_settings_set_in_code_are_not_printed_unless_verbose(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    Accelerator(cpu=True, gradient_accumulation_steps=2)
    assert _said(capfd, caplog) == []


@pytest.mark.usefixtures("verbose")
def test_one_process_prints_code_settings(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    Accelerator(cpu=True, gradient_accumulation_steps=2)
    lines = _said(capfd, caplog)
    assert len(lines) == 1
    assert "verbose=true (env OVERDRIVE_VERBOSE)" in lines[0]
    assert "use_cpu=true (code Accelerator(cpu=...))" in lines[0]
    assert (
        "gradient_accumulation_steps=2 (code Accelerator(gradient_accumulation_steps=...))"
        in (lines[0])
    )


@pytest.mark.usefixtures("verbose")
def test_the_print_is_quiet_above_info(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("overdrive")
    previous = logger.level
    logger.setLevel(logging.WARNING)
    try:
        Accelerator(cpu=True, gradient_accumulation_steps=2)
    finally:
        logger.setLevel(previous)
    assert _said(capfd, caplog) == []


@pytest.mark.usefixtures("no_launcher")
def test_trackers_record_the_effective_settings(tmp_path: Path) -> None:
    accelerator = Accelerator(
        cpu=True, mixed_precision="bf16", log_with="jsonl", project_dir=str(tmp_path / "run")
    )
    accelerator.init_trackers("exp", config={"lr": 0.1})
    accelerator.end_training()
    stored = json.loads((tmp_path / "run" / "exp" / "config.json").read_text())
    assert stored["lr"] == 0.1  # the user's own hyperparameters are kept
    recorded = stored["overdrive_settings"]
    assert recorded["mixed_precision"] == {
        "value": "bf16",
        "source": "code Accelerator(mixed_precision=...)",
    }
    assert recorded["use_cpu"]["value"] is True
    assert "rdzv_backend" not in recorded
