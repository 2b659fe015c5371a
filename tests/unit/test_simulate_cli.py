"""`overdrive launch --simulate`: which ranks it runs, and that it refuses exactly what the
real launch refuses, before anything runs (docs/simulate.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.errors import LaunchError
from overdrive.simulate.ranks import choose_ranks


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(__import__("os").environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_")):
            monkeypatch.delenv(name)


def test_the_first_and_the_last_rank_by_default() -> None:
    assert choose_ranks(None, 512) == [0, 511]
    assert choose_ranks(None, 1) == [0]  # the first is the last: simulated once
    assert choose_ranks("3, -2,3", 8) == [3, 6]


@pytest.mark.parametrize("spec", ["8", "-9", "last", ""])
def test_a_rank_outside_the_world_is_refused(spec: str) -> None:
    with pytest.raises(LaunchError, match="is not a rank of this world of 8 process"):
        choose_ranks(spec, 8)


def test_the_launchs_own_refusal_word_for_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    flags = ["--cpu", "--num_processes", "3", "--parallelism_config_tp_size", "2", str(script)]
    assert main(["launch", "--dry_run", *flags]) == 2
    refused = capsys.readouterr().err
    assert "does not divide the 3 processes" in refused
    assert main(["launch", "--simulate", *flags]) == 2
    assert capsys.readouterr().err == refused


def test_a_simulated_rank_is_checked_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    argv = ["launch", "--simulate", "--simulate_ranks", "4", "--cpu", "--num_processes", "4"]
    assert main([*argv, str(script)]) == 2
    err = capsys.readouterr().err
    assert "--simulate_ranks '4': '4' is not a rank of this world of 4" in err
    assert "must not run" not in err
