"""``fsdp_ignored_modules`` as Hugging Face Accelerate's config files write it (empty) is
accepted; a value is refused by name, since overdrive's FSDP shards every module."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.cli.main import main

FILE = "distributed_type: FSDP\nfsdp_config:\n  fsdp_ignored_modules: {}\n  fsdp_version: 2\n"


def _validate(tmp_path: Path, value: str) -> int:
    path = tmp_path / "fsdp.yaml"
    path.write_text(FILE.format(value) + "num_processes: 2\nuse_cpu: true\n")
    return main(["config", "validate", str(path)])


def test_an_empty_entry_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _validate(tmp_path, "null") == 0
    assert "valid" in capsys.readouterr().out


def test_a_value_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, "lm_head") == 2
    err = capsys.readouterr().err
    assert "fsdp_config.fsdp_ignored_modules = 'lm_head'" in err and "fix: remove" in err
