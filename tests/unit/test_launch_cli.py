"""`overdrive launch` argument handling (through --dry_run) and `overdrive env`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from overdrive.cli.env_cmd import OPTIONAL_BACKENDS, backend_versions, report
from overdrive.cli.launch_cmd import flag_settings
from overdrive.cli.main import main


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(__import__("os").environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_")):
            monkeypatch.delenv(name)


def dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["launch", "--dry_run", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def setting_rows(out: str) -> dict[str, list[str]]:
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and "=" not in line]
    return {row[0]: row[1:] for row in rows}


def test_both_spellings_and_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    code, out, _ = dry_run(
        capsys, "--num-processes", "3", "--cpu", "--dynamo_backend", "inductor",
        "--zero_stage", "2", str(script),
    )  # fmt: skip
    assert code == 0
    rows = setting_rows(out)
    assert rows["num_processes"] == ["3", "flag", "--num_processes"]
    assert rows["use_cpu"] == ["True", "flag", "--cpu"]
    assert rows["dynamo_config.dynamo_backend"] == ["inductor", "flag", "--dynamo_backend"]
    assert rows["deepspeed_config.zero_stage"][0] == "2"
    assert rows["mixed_precision"] == ["no", "default"]  # unset flags stay unset


def test_script_args_after_the_script_are_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    _, out, _ = dry_run(capsys, "--cpu", "--", str(script), "--cpu", "--", "-q", "a b")
    command = next(line for line in out.splitlines() if "RANK=0" in line)
    assert command.endswith(f"{script} --cpu -- -q 'a b'")
    _, out, _ = dry_run(capsys, "--cpu", "-m", "json.tool", "--sort-keys")
    command = next(line for line in out.splitlines() if "RANK=0" in line)
    assert command.endswith("overdrive.launch.bootstrap -m json.tool --sort-keys")


def test_user_errors_exit_2_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = dry_run(capsys, "--cpu")
    assert code == 2 and err.startswith("overdrive: error: no script to launch")
    code, _, err = dry_run(capsys, "--cpu", str(tmp_path / "missing.py"))
    assert code == 2 and "does not exist" in err
    script = tmp_path / "t.py"
    script.write_text("")
    code, _, err = dry_run(capsys, "--cpu", "--mixed_precision", "fp12", str(script))
    assert code == 2 and "--mixed_precision" in err and "Traceback" not in err


def test_every_flag_maps_to_one_setting() -> None:
    names = [name for name, _ in flag_settings()]
    assert len(names) == len(set(names))
    assert {"cpu", "num_processes", "zero_stage", "fsdp_sharding_strategy"} <= set(names)
    assert "megatron_lm_tp_degree" in names


def test_env_report_lists_versions_backends_and_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("mixed_precision: bf16\n")
    before = {name for name in OPTIONAL_BACKENDS if name in sys.modules}
    text = report(str(cfg))
    assert "torch: " in text and "Python: " in text and "GPUs visible: 0" in text
    assert f"config file (given): {cfg}" in text and "mixed_precision: bf16" in text
    assert all(f"  {name}: " in text for name in OPTIONAL_BACKENDS)
    backend_versions()
    assert {name for name in OPTIONAL_BACKENDS if name in sys.modules} == before  # none imported


def test_env_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("overdrive: ") and "not present; defaults apply" in out
