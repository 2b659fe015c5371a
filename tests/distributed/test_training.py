"""One training script, three ways to start it: `overdrive launch`, torchrun, plain python.

The script (scripts/train_equivalence.py) holds the checks; see its docstring.
"""

from __future__ import annotations

from tests.helpers.dist import SCRIPTS, assert_ok, run_launch, run_python, run_torchrun

SCRIPT = SCRIPTS / "train_equivalence.py"


def test_training_semantics_under_overdrive_launch() -> None:
    result = run_launch(SCRIPT, nprocs=2)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=2" in result.stdout
    assert result.stdout.count("ALL CHECKS PASSED") == 1  # accelerator.print: main only


def test_training_semantics_on_three_processes() -> None:
    # W = 3: the short last batch is padded unevenly (3 real samples for 6 slots)
    result = run_launch(SCRIPT, nprocs=3)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=3" in result.stdout


def test_training_semantics_under_torchrun() -> None:
    result = run_torchrun(SCRIPT)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=2" in result.stdout


def test_training_semantics_under_plain_python() -> None:
    result = run_python(SCRIPT)
    assert_ok(result)
    assert "ALL CHECKS PASSED world=1" in result.stdout
