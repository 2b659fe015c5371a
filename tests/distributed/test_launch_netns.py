"""Two machines as two network namespaces joined by a virtual cable (root on Linux only).

Each launcher sees only its own interface and address, as on two hosts; the group forms
over the cable. Skipped where network namespaces cannot be created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.helpers.dist import REPO, clean_env, launch_command, result_rows

pytestmark = pytest.mark.distributed

SUBNET = "10.213.7"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts() -> Iterator[list[tuple[str, str, str]]]:
    """(namespace, interface, address) for two namespaces linked by a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = f"od{os.getpid() % 100000}"
    hosts = [(f"{tag}a", f"{tag}va", f"{SUBNET}.1"), (f"{tag}b", f"{tag}vb", f"{SUBNET}.2")]
    made: list[str] = []
    try:
        for ns, _, _ in hosts:
            if _ip("netns", "add", ns).returncode != 0:
                pytest.skip("cannot create network namespaces here")
            made.append(ns)
        (ns_a, if_a, _), (ns_b, if_b, _) = hosts
        steps = [
            ("link", "add", if_a, "type", "veth", "peer", "name", if_b),
            ("link", "set", if_a, "netns", ns_a),
            ("link", "set", if_b, "netns", ns_b),
        ]
        for ns, iface, addr in hosts:
            steps += [
                ("-n", ns, "addr", "add", f"{addr}/24", "dev", iface),
                ("-n", ns, "link", "set", iface, "up"),
                ("-n", ns, "link", "set", "lo", "up"),
            ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(
                    f"cannot set up the virtual network: ip {' '.join(step)}: {done.stderr}"
                )
        yield hosts
    finally:
        for ns in made:  # deleting a namespace removes its end of the cable, and the cable
            _ip("netns", "del", ns)


def test_two_namespaces_form_one_group(two_hosts: list[tuple[str, str, str]]) -> None:
    main_ip = two_hosts[0][2]
    machines = []
    for rank, (ns, iface, _) in enumerate(two_hosts):
        launch = launch_command(
            "launch_allreduce.py",
            nprocs=2,
            args=[f"host{rank}"],
            launch_args=["--num_machines", "2", "--machine_rank", str(rank),
                         "--main_process_ip", main_ip, "--main_process_port", "29500"],
        )  # fmt: skip
        machines.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, *launch],
                env=clean_env({"GLOO_SOCKET_IFNAME": iface}),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [m.communicate(timeout=180) for m in machines]
    for machine, (out, err) in zip(machines, outputs):
        assert machine.returncode == 0, f"{out}\n{err}"
    rows = result_rows(outputs[0][0] + outputs[1][0])
    assert [r["rank"] for r in rows] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 1.0 for r in rows)
    assert [r["argv"][0] for r in rows] == ["host0", "host1"]
