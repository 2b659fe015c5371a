"""Failures under `overdrive launch`: a raising rank, SIGTERM, restarts, busy ports, dry runs."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.dist import (
    REPO,
    SCRIPTS,
    assert_ok,
    clean_env,
    free_port,
    launch_command,
    run_launch,
)

pytestmark = pytest.mark.distributed


def _poll(condition, timeout: float = 120.0) -> bool:
    """Wait for ``condition()`` to hold, checking often; False if it never did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_failing_rank_stops_the_group_and_its_traceback_is_told_once() -> None:
    """Issue 41: the failing rank's traceback once, the stranded rank in one line."""
    done = run_launch("launch_fail.py", nprocs=2, args=["1"], timeout=120)
    assert done.returncode == 1
    assert "UNREACHABLE" not in done.stdout  # rank 0 was stopped inside its all-reduce
    lines = done.stderr.rstrip().splitlines()
    assert lines.count("Traceback (most recent call last):") == 1, done.stderr
    start = lines.index("Traceback (most recent call last):")
    assert "launch_fail.py" in lines[start + 1]  # starts in the user's script, not the bootstrap
    assert lines.count("RuntimeError: planned failure on rank 1") == 1, done.stderr
    summary = [line for line in lines if line.startswith("overdrive: rank 1 failed")]
    assert len(summary) == 1 and "exit code 1" in summary[0], done.stderr
    assert "its traceback is above" in summary[0]
    rank_0 = [line for line in lines if "rank 0" in line or "Connection closed" in line]
    assert len(rank_0) == 1 and rank_0[0].startswith("overdrive:   rank 0: "), done.stderr
    assert "also failed" not in done.stderr


def test_a_scripts_own_exit_code_and_message_pass_through(tmp_path: Path) -> None:
    """A flag placed after the script reaches the script's argparse: its usage message and
    exit code 2, with no SystemExit traceback."""
    script = tmp_path / "args.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    done = run_launch(script, nprocs=2, args=["--bogus"], timeout=120)
    assert done.returncode == 2, done.stderr
    assert "args.py: error: unrecognized arguments: --bogus" in done.stderr
    assert "Traceback" not in done.stderr and "SystemExit" not in done.stderr, done.stderr
    assert "ended with exit code 2" in done.stderr


def test_sigterm_to_the_launcher_leaves_no_worker_alive(tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        launch_command("launch_hang.py", nprocs=2, args=[str(tmp_path)]),
        env=clean_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        files = [tmp_path / "pids_0", tmp_path / "pids_1"]
        assert _poll(lambda: all(f.exists() for f in files)), launcher.stderr
        pids = [int(p) for f in files for p in f.read_text().split()]  # workers + children
        assert all(psutil.pid_exists(pid) for pid in pids)
        launcher.send_signal(signal.SIGTERM)
        _, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in err
    assert _poll(lambda: all(_gone(pid) for pid in pids), timeout=30), pids


@pytest.mark.parametrize("rdzv", [pytest.param("static", marks=pytest.mark.extended), "c10d"])
def test_max_restarts_reruns_a_group_that_failed_once(tmp_path: Path, rdzv: str) -> None:
    marker = tmp_path / "failed-once"
    done = run_launch(
        "launch_fail_once.py",
        nprocs=2,
        args=[str(marker)],
        launch_args=["--max_restarts", "1", "--rdzv_backend", rdzv],
    )
    assert_ok(done)
    assert marker.exists()
    rows = [json.loads(x[7:]) for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    assert all(r["restart"] == 1 and r["sum"] == 1.0 for r in rows)
    assert "rank 1 failed (RuntimeError: first attempt fails); restarting the group" in done.stderr


def test_busy_port_with_several_machines_is_a_clear_error(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_launch(
            "launch_marker.py",
            nprocs=4,
            args=[str(marker)],
            launch_args=[
                "--num_machines", "2", "--machine_rank", "0",
                "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
            ],
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(f"overdrive: error: main_process_port {port}")
    assert "flag --main_process_port" in done.stderr and "fix:" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def test_dry_run_lists_sources_and_commands_and_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    port = free_port()
    config = tmp_path / "cfg.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\nmixed_precision: bf16\n")
    done = run_launch(
        "launch_marker.py",
        nprocs=2,
        args=[str(marker), "two words"],
        launch_args=["--dry_run", "--config_file", str(config), "--main_process_port", str(port)],
        env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"},
    )
    assert_ok(done)
    assert not marker.exists()
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert rows["mixed_precision"].split()[1:] == ["bf16", "file", f"{config}:2"]
    assert rows["gradient_accumulation_steps"].split()[1:] == [
        "4", "env", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    ]  # fmt: skip
    assert rows["num_processes"].split()[1:] == ["2", "flag", "--num_processes"]
    assert rows["use_cpu"].split()[1:] == ["true", "flag", "--cpu"]
    commands = [line for line in done.stdout.splitlines() if line.startswith("  env RANK=")]
    assert len(commands) == 2
    assert "RANK=1 LOCAL_RANK=1" in commands[1] and f"MASTER_PORT={port}" in commands[1]
    assert "-m overdrive.launch.bootstrap" in commands[0]
    assert commands[0].endswith(f"launch_marker.py {marker} 'two words'")


def test_port_taken_after_the_check_moves_to_a_free_port() -> None:
    """Another program binds the port between the launcher's check and the rendezvous.

    c10d reports the same socket error wrapped; see the unit test of ``_address_in_use``.
    """
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "launch_port_taken.py"),
            str(SCRIPTS / "launch_allreduce.py"),
        ],
        env=clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert_ok(done)
    busy = int(done.stdout.splitlines()[0].split()[1])
    assert f"port {busy} was taken before the rendezvous could use it" in done.stderr
    rows = [json.loads(x[7:]) for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert sorted(r["rank"] for r in rows) == [0, 1] and all(r["sum"] == 1.0 for r in rows)
