"""The sanity check behind `overdrive test`: its comparison and a one-process run."""

from __future__ import annotations

import pytest

from overdrive import sanity_check
from overdrive.cli.main import main


def test_check_close_names_every_rank_that_disagrees() -> None:
    sanity_check.check_close("loss", [1.0, 1.0 + 1e-7], 1.0, 1e-5)
    with pytest.raises(RuntimeError, match=r"loss should be 1.0 .* rank 1: 1.5, rank 2: 0.0"):
        sanity_check.check_close("loss", [1.0, 1.5, 0.0], 1.0, 1e-5)


def test_one_process_run_passes(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    summary = sanity_check.run()
    assert summary is not None and summary.startswith("OK: 1 process(es) on cpu")


def test_dry_run_plans_the_bundled_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["test", "--dry_run", "--cpu", "--num-processes", "2"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if "overdrive.launch.bootstrap" in line]
    assert len(commands) == 2 and commands[1].endswith("-m overdrive.sanity_check")
