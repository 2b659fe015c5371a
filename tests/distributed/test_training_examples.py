"""The shipped examples run: the digits demo on 2 processes, the text classifier on one."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.dist import REPO, assert_ok, run_launch, run_python

EXAMPLES = REPO / "examples"


def test_digits_demo_trains_on_two_processes() -> None:
    result = run_launch(EXAMPLES / "digits_ddp.py", nprocs=2)
    assert_ok(result)
    match = re.search(r"held-out accuracy: ([0-9.]+) on (\d+) images \(of (\d+)\)", result.stdout)
    assert match, result.stdout
    accuracy, gathered, total = float(match[1]), int(match[2]), int(match[3])
    assert gathered == total == 450  # gather_for_metrics: every held-out image exactly once
    assert accuracy > 0.85
    assert "2 process(es)" in result.stdout
    # into a pipe the launcher keeps each bar's last state: one finished bar, process 0's
    bars = re.findall(r"\| 176/176 \[", result.stderr)
    assert len(bars) == 1, "the progress bar must show on the main process only"


def test_text_classifier_runs_on_one_process(tmp_path: Path) -> None:
    out = tmp_path / "model"
    result = run_python(EXAMPLES / "text_classifier.py", "--output_dir", str(out), cwd=tmp_path)
    assert_ok(result)
    assert "epoch 2 finished" in result.stdout
    assert (out / "model.safetensors").is_file()


def test_readme_loop_runs_on_two_processes() -> None:
    """The README's loop is the file examples/readme_loop.py: it must keep working."""
    readme = (REPO / "README.md").read_text()
    loop = (EXAMPLES / "readme_loop.py").read_text().split('"""', 2)[2].strip()
    assert loop in readme
    result = run_launch(EXAMPLES / "readme_loop.py", nprocs=2)
    assert_ok(result)
    assert re.search(r"final loss [0-9.]+ on 2 processes", result.stdout), result.stdout
