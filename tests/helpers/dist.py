"""Run a script on several CPU processes for distributed tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "distributed" / "scripts"


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it, so parallel tests differ)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without distributed or overdrive variables or config."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ACCELERATE_", "OVERDRIVE_", "TORCHELASTIC_"))
    }
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    # A developer's own default config file must not change what the tests run.
    env["XDG_CACHE_HOME"] = "/nonexistent/overdrive-tests"
    env.update(extra or {})
    return env


def run_launch(
    script: str | Path,
    *,
    nprocs: int = 2,
    args: Sequence[str] = (),
    launch_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    module: bool = False,
    rank_prefix: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`overdrive launch --num_processes N script args` on CPU; returns the finished process.

    With ``module=True``, ``script`` is a module name run as ``-m script`` from the repo root.
    Workers' lines come without the launcher's ``[rank N] `` prefix unless ``rank_prefix``.
    """
    cmd = launch_command(
        script,
        nprocs=nprocs,
        args=args,
        launch_args=launch_args,
        module=module,
        rank_prefix=rank_prefix,
    )
    return subprocess.run(
        cmd, env=clean_env(env), capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def start_launch(
    script: str | Path,
    *,
    nprocs: int = 2,
    args: Sequence[str] = (),
    launch_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    """`run_launch`'s command started and left running, its output piped (for two launches
    side by side); `finish_launch` waits for it."""
    cmd = launch_command(script, nprocs=nprocs, args=args, launch_args=launch_args)
    return subprocess.Popen(
        cmd,
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def finish_launch(
    process: subprocess.Popen[str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Wait for a `start_launch` process; what `run_launch` would have returned."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()  # the launcher ends its workers on SIGTERM
        try:
            process.communicate(timeout=30)
        finally:
            process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def launch_command(
    script: str | Path,
    *,
    nprocs: int = 2,
    args: Sequence[str] = (),
    launch_args: Sequence[str] = (),
    module: bool = False,
    rank_prefix: bool = False,
) -> list[str]:
    """The command line `run_launch` runs (for tests that need to start it themselves)."""
    if module:
        target = ["-m", str(script)]
    else:
        script_path = Path(script)
        if not script_path.is_absolute():
            script_path = SCRIPTS / script_path
        target = [str(script_path)]
    return [
        sys.executable,
        "-m",
        "overdrive",
        "launch",
        "--cpu",
        "--num_processes",
        str(nprocs),
        *([] if rank_prefix else ["--no_rank_prefix"]),
        *launch_args,
        *target,
        *args,
    ]


def run_torchrun(
    script: Path, *, nprocs: int = 2, args: Sequence[str] = (), timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """The same script under plain `torchrun` (torch.distributed.run) on its own free port."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nprocs)]
    cmd += ["--master_port", str(free_port()), str(script), *args]
    return subprocess.run(
        cmd, env=clean_env(), capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def run_python(
    script: Path, *args: str, timeout: float = 180, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """The same script started with plain `python` (one process, no launcher)."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    """Fail with both output streams when a launched run did not exit 0."""
    assert result.returncode == 0, (
        f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


def result_rows(stdout: str) -> list[dict]:
    """The ``RESULT {json}`` lines workers print, sorted by rank."""
    rows = [
        json.loads(line[len("RESULT ") :])
        for line in stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    return sorted(rows, key=lambda row: row["rank"])
