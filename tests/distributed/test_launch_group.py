"""`overdrive launch` forms one process group: 2 and 3 processes, modules, two machines."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.helpers.dist import (
    REPO,
    assert_ok,
    clean_env,
    free_port,
    launch_command,
    result_rows,
    run_launch,
)

pytestmark = pytest.mark.distributed

ODD_ARGS = ["--lr", "1e-3", "two words", "-x", "--", "--num_processes", "7", ""]


def test_two_processes_form_one_group_and_args_pass_through() -> None:
    done = run_launch("launch_allreduce.py", nprocs=2, args=ODD_ARGS, launch_args=["--verbose"])
    assert_ok(done)
    rows = result_rows(done.stdout)
    assert [r["rank"] for r in rows] == [0, 1]
    for row in rows:
        assert row["world"] == 2 and row["local_world_size"] == 2
        assert row["sum"] == 1.0  # 0 + 1: both ranks are in the same group
        assert row["argv"] == ODD_ARGS
        assert row["main"] == "__main__"
        assert row["num_processes_source"] == "flag --num_processes"
    banner = [line for line in done.stderr.splitlines() if line.startswith("overdrive launch:")]
    assert len(banner) == 1  # said at --verbose only (issue 41)
    assert "2 process(es)" in banner[0] and "gloo on cpu" in banner[0]
    assert "flags" in banner[0] and "--num_processes" in banner[0]


def test_three_processes_module_launch_c10d_and_busy_port() -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_launch(
            "tests.distributed.scripts.launch_allreduce",
            module=True,
            nprocs=3,
            args=["--flag", "a b"],
            launch_args=["--rdzv_backend", "c10d", "--main-process-port", str(port), "-v"],
        )
    assert_ok(done)
    rows = result_rows(done.stdout)
    assert [r["rank"] for r in rows] == [0, 1, 2]
    assert all(r["sum"] == 3.0 and r["world"] == 3 for r in rows)
    assert all(r["argv"] == ["--flag", "a b"] for r in rows)
    assert f"main_process_port {port}" in done.stderr and "using free port" in done.stderr


@pytest.mark.parametrize("rdzv", [pytest.param("static", marks=pytest.mark.extended), "c10d"])
def test_two_machines_on_loopback_form_one_group(rdzv: str) -> None:
    port = free_port()
    machines = [
        subprocess.Popen(
            launch_command(
                "launch_allreduce.py",
                nprocs=4,
                args=[f"machine{rank}"],
                launch_args=[
                    "--num_machines",
                    "2",
                    "--machine_rank",
                    str(rank),
                    "--main_process_ip",
                    "127.0.0.1",
                    "--main_process_port",
                    str(port),
                    "--rdzv_backend",
                    rdzv,
                    "--verbose",
                ],
            ),  # fmt: skip
            env=clean_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [m.communicate(timeout=180) for m in machines]
    for machine, (out, err) in zip(machines, outputs):
        assert machine.returncode == 0, f"{out}\n{err}"
    rows = result_rows(outputs[0][0] + outputs[1][0])
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 6.0 and r["local_world_size"] == 2 for r in rows)
    by_machine = {r["rank"]: r["argv"][0] for r in rows}
    if rdzv == "static":  # static rendezvous keeps machine_rank order; c10d may not
        assert by_machine == {0: "machine0", 1: "machine0", 2: "machine1", 3: "machine1"}
    assert sorted(by_machine.values()) == ["machine0"] * 2 + ["machine1"] * 2
    assert "overdrive launch:" in outputs[0][1]  # the main machine's banner...
    assert "overdrive launch:" not in outputs[1][1]  # ...and only there
