"""transformers' Trainer on overdrive: a plain Trainer script trains through the accelerate alias."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, assert_ok, clean_env, run_launch

pytest.importorskip("transformers")

SCRIPT = Path(__file__).parent / "scripts" / "trainer_case.py"


def _spec(out: Path, batch: int) -> str:
    return json.dumps({"out": str(out), "output_dir": str(out.parent / out.stem), "batch": batch})


def _read(path: Path) -> dict:
    row = json.loads(path.read_text())
    row["weight_sum"] = sum(row["weights"].values())
    return row


def _run_plain(out: Path, batch: int) -> dict:
    """``python -m overdrive.run trainer_case.py`` (no launcher)."""
    cmd = [sys.executable, "-m", "overdrive.run", str(SCRIPT), _spec(out, batch)]
    result = subprocess.run(
        cmd, env=clean_env(), capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return _read(out)


def _run_launched(out: Path, nprocs: int, batch: int) -> tuple[dict, str]:
    result = run_launch(SCRIPT, nprocs=nprocs, args=[_spec(out, batch)], timeout=300)
    assert_ok(result)
    return _read(out), result.stderr


def _rel_close(a: list[float], b: list[float], rel: float) -> bool:
    return all(abs(x - y) <= rel * abs(y) for x, y in zip(a, b, strict=True))


@pytest.mark.distributed
def test_one_process_launch_equals_python_m_overdrive_run(tmp_path: Path) -> None:
    plain = _run_plain(tmp_path / "plain.json", batch=4)
    launched, stderr = _run_launched(tmp_path / "launched.json", nprocs=1, batch=4)
    assert "`import accelerate` -> overdrive" in stderr
    assert (plain["world"], launched["world"]) == (1, 1)
    assert len(plain["losses"]) == 6
    assert plain["losses"] == launched["losses"]
    assert plain["weight_sum"] == launched["weight_sum"]


@pytest.mark.distributed
def test_two_process_ddp_equals_one_process_with_doubled_batch(tmp_path: Path) -> None:
    one = _run_plain(tmp_path / "one.json", batch=4)
    ddp, _ = _run_launched(tmp_path / "ddp.json", nprocs=2, batch=2)
    assert ddp["world"] == 2
    assert len(ddp["losses"]) == 6
    assert _rel_close(ddp["losses"], one["losses"], 1e-5), (ddp["losses"], one["losses"])
    assert abs(ddp["weight_sum"] - one["weight_sum"]) <= 1e-6 * abs(one["weight_sum"])
    # the loss moved: the run trained rather than repeating its first step
    assert len(set(one["losses"])) > 1


def _fake_installed_accelerate(tmp_path: Path) -> dict[str, str]:
    """An environment where a (fake) accelerate 9.9.9 is installed: its module and metadata."""
    site = tmp_path / "site"
    (site / "accelerate-9.9.9.dist-info").mkdir(parents=True)
    (site / "accelerate-9.9.9.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: accelerate\nVersion: 9.9.9\n"
    )
    (site / "accelerate").mkdir()
    (site / "accelerate" / "__init__.py").write_text("WHO = 'the installed one'\n")
    return clean_env({"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])})


@pytest.mark.distributed
def test_opt_in_refused_without_flag_when_real_accelerate_installed(tmp_path: Path) -> None:
    """A fake installed accelerate: plain ``python -m overdrive.run`` refuses, naming the opt-in."""
    env = _fake_installed_accelerate(tmp_path)
    cmd = [sys.executable, "-m", "overdrive.run", str(SCRIPT), _spec(tmp_path / "x.json", 4)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode != 0
    assert "OVERDRIVE_AS_ACCELERATE=1" in result.stderr and "9.9.9" in result.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.distributed
def test_config_file_key_opts_in_over_an_installed_accelerate(tmp_path: Path) -> None:
    """``as_accelerate: true`` in the config file does what ``--as_accelerate`` does; without
    it the workers get the installed package, and the launcher says which they get."""
    env = _fake_installed_accelerate(tmp_path)
    script = tmp_path / "who.py"
    script.write_text(
        "import accelerate\nprint('ENGINE', getattr(accelerate, 'WHO', 'overdrive'))\n"
    )
    config = tmp_path / "c.yaml"
    for key, engine in (("false", "the installed one"), ("true", "overdrive")):
        config.write_text(f"as_accelerate: {key}\n")
        cmd = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--num_processes", "1"]
        cmd += ["--config_file", str(config), str(script)]
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"ENGINE {engine}" in result.stdout
        said = "shadows installed accelerate 9.9.9" if key == "true" else "the installed accelerate"
        assert said in result.stderr
