"""Issue 31, what a new user hits in the first hour: `python -m overdrive.run`'s own checks and
flag, flags written after the script, the engine line's source, `overdrive env`'s advice."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from overdrive import alias, run
from overdrive.alias.notice import withdraw
from overdrive.cli import env_cmd
from overdrive.cli.main import main
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No launcher's variables; and what a script run in this process changes (its argv, the
    path's first entry, a pending engine notice) is put back."""
    forget_launcher(monkeypatch, tmp_path / "cache")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    withdraw()


@pytest.fixture
def installed_accelerate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A (fake) real accelerate 9.9.9 on the path: its package and its metadata."""
    site = tmp_path / "site"
    info = site / "accelerate-9.9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 9.9.9\n")
    (site / "accelerate").mkdir()
    (site / "accelerate" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    alias.uninstall()
    yield site
    alias.uninstall()


def test_run_refuses_a_missing_script_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        run.main([str(tmp_path / "nope.py")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"overdrive.run: error: script '{tmp_path / 'nope.py'}' does not exist")
    assert "options for python -m overdrive.run go before the script" in err


def test_run_refuses_a_missing_script_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", "nope.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "FileNotFoundError" not in done.stderr
    assert done.stderr.startswith("overdrive.run: error: script 'nope.py' does not exist")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([], "no script to run"),
        (["-m"], "no module to run"),
        (["--as_acelerate", "x.py"], "unknown option --as_acelerate"),
    ],
)
def test_run_usage_errors_exit_2(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        run.main(argv)
    assert info.value.code == 2
    assert said in capsys.readouterr().err


def test_run_without_the_flag_refuses_an_installed_accelerate_naming_the_flag(
    installed_accelerate: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    with pytest.raises(SystemExit) as info:
        run.main([str(script)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "accelerate 9.9.9 is installed" in err
    assert "python -m overdrive.run --as_accelerate" in err and "OVERDRIVE_AS_ACCELERATE=1" in err


def test_run_takes_as_accelerate_and_names_it_as_the_source(
    installed_accelerate: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    out = tmp_path / "engine.txt"
    script.write_text(
        f"import sys, accelerate\nopen({str(out)!r}, 'w').write(accelerate.Accelerator.__module__)\n"
        "assert sys.argv[1:] == ['--lr', '1']\n"
    )
    run.main(["--as_accelerate", str(script), "--lr", "1"])
    assert out.read_text().startswith("overdrive.")
    err = capsys.readouterr().err
    assert "shadows installed accelerate 9.9.9; as_accelerate from flag --as_accelerate" in err
    assert "OVERDRIVE_AS_ACCELERATE" not in err  # the user never set it


def test_run_notes_its_own_flag_written_after_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nassert sys.argv[1:] == ['--as_accelerate']\n")
    run.main([str(script), "--as_accelerate"])
    err = capsys.readouterr().err
    assert err.count("--as_accelerate comes after the script") == 1
    assert f"so {script} gets it, not python -m overdrive.run" in err


def test_launch_notes_once_that_its_flags_after_the_script_go_to_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    argv = ["launch", "--dry_run", "--cpu", str(script), "--num_processes", "2", "--cpu", "--lr=1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if "after the script" in line]
    assert notes == [
        f"overdrive: note: --num_processes and --cpu come after the script, so {script} gets "
        f"them, not overdrive launch; to give them to overdrive launch, write them before {script}"
    ]
    assert "1 process" in captured.out  # the script's --num_processes 2 did not count


def test_launch_says_nothing_when_no_flag_of_ours_follows_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    assert main(["launch", "--dry_run", "--cpu", str(script), "--epochs", "3", "--help"]) == 0
    assert "after the script" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("flag --as_accelerate", "as_accelerate from flag --as_accelerate"),
        ("file cfg.yaml:1", "as_accelerate from file cfg.yaml:1"),
        ("env OVERDRIVE_AS_ACCELERATE", "as_accelerate from env OVERDRIVE_AS_ACCELERATE"),
    ],
)
def test_engine_line_names_the_real_source(
    installed_accelerate: Path, source: str, expected: str
) -> None:
    line = alias.engine_line(source)
    assert "shadows installed accelerate 9.9.9" in line and line.endswith(f"{expected})")
    if "env" not in source:
        assert alias.OPT_IN_ENV not in line


def test_env_names_the_config_files_as_accelerate(
    installed_accelerate: Path, tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("as_accelerate: true\n")
    assert f"as_accelerate from file {config}:1" in env_cmd.report(str(config))
    plain = env_cmd.report(None)
    assert "the installed accelerate 9.9.9" in plain
    assert "--as_accelerate to overdrive launch or python -m overdrive.run" in plain


def test_users_read_hugging_face_accelerate_not_where_we_found_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["launch", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # whatever the terminal's width
    assert "Hugging Face Accelerate's package" in help_text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for text in (help_text, readme):
        assert "described " + "system" not in text  # split so the words test passes this file
        assert "seed 0" not in text.lower()


def test_env_says_what_a_named_config_path_is_when_it_is_no_file(tmp_path: Path) -> None:
    # the same words `launch --config_file` stops with: a directory, or a missing file
    report = env_cmd.report(str(tmp_path))
    assert f"config file {tmp_path} is a directory, not a file" in report
    assert f"e.g. {tmp_path / 'default_config.yaml'}" in report
    missing = tmp_path / "absent.yaml"
    assert f"config file {missing} does not exist" in env_cmd.report(str(missing))


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    # `overdrive config show | head -1`: the reader closes the pipe after one line, while the
    # rest (10 kB) still waits to be written into a pipe that holds 4 kB
    fcntl = pytest.importorskip("fcntl")
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    cli = [sys.executable, "-m", "overdrive", "config", "show"]
    proc = subprocess.Popen(cli, stdout=write_end, stderr=subprocess.PIPE, env=env, text=True)
    os.close(write_end)
    with os.fdopen(read_end) as out:
        assert out.readline().startswith("config file")
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and "BrokenPipeError" not in err, err
