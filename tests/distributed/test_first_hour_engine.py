"""Issue 31: which engine ``import accelerate`` gets is said with the real source of
``as_accelerate`` (flag, environment or config file), only when the script imports it; a
Ctrl-C ends a launch with one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.dist import clean_env, launch_command, run_launch

WHO = "import accelerate\nprint('ENGINE', getattr(accelerate, 'WHO', 'overdrive'), flush=True)\n"
SPIN = """\
import torch
import torch.distributed as dist

from overdrive import Accelerator

accelerator = Accelerator()
value = torch.ones(1)
print(f"ready {accelerator.process_index}", flush=True)
while True:
    dist.all_reduce(value)
"""


def _installed_accelerate(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Variables for a run where a (fake) accelerate 9.9.9 is installed."""
    site = tmp_path / "site"
    (site / "accelerate-9.9.9.dist-info").mkdir(parents=True)
    (site / "accelerate-9.9.9.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: accelerate\nVersion: 9.9.9\n"
    )
    (site / "accelerate").mkdir()
    (site / "accelerate" / "__init__.py").write_text("WHO = 'the installed one'\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, **(extra or {})}


@pytest.mark.distributed
@pytest.mark.parametrize("source", ["flag", "env", "file"])
def test_the_engine_line_names_where_as_accelerate_came_from(source: str, tmp_path: Path) -> None:
    script = tmp_path / "who.py"
    script.write_text(WHO)
    config = tmp_path / "c.yaml"
    config.write_text("as_accelerate: true\n" if source == "file" else "num_machines: 1\n")
    env = _installed_accelerate(
        tmp_path, {"OVERDRIVE_AS_ACCELERATE": "1"} if source == "env" else {}
    )
    launch_args = ["--config_file", str(config), *(["--as_accelerate"] if source == "flag" else [])]
    done = run_launch(script, nprocs=1, launch_args=launch_args, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ENGINE overdrive" in done.stdout
    expected = {
        "flag": "flag --as_accelerate",
        "env": "env OVERDRIVE_AS_ACCELERATE",
        "file": f"file {config}:1",
    }[source]
    lines = [line for line in done.stderr.splitlines() if "`import accelerate` ->" in line]
    assert lines == [
        "overdrive: `import accelerate` -> overdrive (shadows installed accelerate 9.9.9; "
        f"as_accelerate from {expected})"
    ]


@pytest.mark.distributed
@pytest.mark.parametrize("source", ["env", "file"])
def test_overdrive_run_names_its_source_too(source: str, tmp_path: Path) -> None:
    script = tmp_path / "who.py"
    script.write_text(WHO)
    cache = tmp_path / "cache"
    extra = {"XDG_CACHE_HOME": str(cache)}
    if source == "env":
        extra["OVERDRIVE_AS_ACCELERATE"] = "1"
    else:
        (cache / "overdrive").mkdir(parents=True)
        (cache / "overdrive" / "default_config.yaml").write_text("as_accelerate: true\n")
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", str(script)],
        env=clean_env(_installed_accelerate(tmp_path, extra)),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ENGINE overdrive" in done.stdout
    where = (
        "env OVERDRIVE_AS_ACCELERATE"
        if source == "env"
        else f"file {cache / 'overdrive' / 'default_config.yaml'}:1"
    )
    assert f"as_accelerate from {where})" in done.stderr


@pytest.mark.distributed
def test_the_engine_line_comes_only_when_the_script_imports_accelerate(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("from overdrive import Accelerator\nAccelerator()\nprint('done')\n")
    done = run_launch(plain, nprocs=2, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "import accelerate" not in done.stderr
    who = tmp_path / "who.py"
    who.write_text(WHO)
    done = run_launch(who, nprocs=2, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ENGINE overdrive") == 2
    assert done.stderr.count("`import accelerate` -> overdrive") == 1  # rank 0, once


@pytest.mark.distributed
def test_ctrl_c_ends_a_launch_with_one_line(tmp_path: Path) -> None:
    script = tmp_path / "spin.py"
    script.write_text(SPIN)
    launcher = subprocess.Popen(
        launch_command(script, nprocs=2),
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal goes to the launcher alone, as a terminal's would
    )
    guard = threading.Timer(180, launcher.kill)  # a hung launch fails the test, never hangs it
    guard.start()
    try:
        assert launcher.stdout is not None
        ready = set()
        for line in launcher.stdout:
            if line.startswith("ready"):
                ready.add(line.split()[-1])
            if len(ready) == 2:
                break
        assert ready == {"0", "1"}
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=120)
    finally:
        guard.cancel()
    assert launcher.returncode == 130, err[-3000:]
    after = err.split("effective settings", 1)[-1]
    for noise in ("Traceback", "KeyboardInterrupt", "Connection closed", "Error"):
        assert noise not in after, err[-3000:]
    assert err.rstrip().endswith("overdrive: stopped by SIGINT; all workers on this machine ended.")
