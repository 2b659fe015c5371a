"""The main process port: check it is free before any process starts, or pick another."""

from __future__ import annotations

import dataclasses
import socket

from overdrive.errors import LaunchError
from overdrive.launch.plan import LaunchPlan


def port_is_free(port: int, host: str = "", *, ipv6: bool = False) -> bool:
    """True when nothing listens on ``port`` on ``host`` (by default, any local address).

    SO_REUSEADDR mirrors the store's own bind: ports in TIME_WAIT count as free.
    """
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port the operating system reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def settle_port(plan: LaunchPlan) -> LaunchPlan:
    """Return the plan with a usable port; a busy port moves on one machine, fails on several.

    Only the main machine hosts the rendezvous store, so only it can check the port.
    """
    source = plan.settings.source("main_process_port")
    if plan.num_machines == 1 and plan.max_restarts == 0 and source.kind == "default":
        # Without the agent nothing holds the port until rank 0 binds it, seconds later: two
        # launches started together on the shared default would meet in one store.
        return dataclasses.replace(plan, main_port=free_port())
    if not plan.is_main_machine or port_is_free(plan.main_port):
        return plan
    if plan.num_machines > 1:
        raise LaunchError(
            f"main_process_port {plan.main_port} ({source}) is already in use on this machine, "
            "and the other machines will connect to it\n"
            "  fix: stop the program using it, or choose a free port with --main_process_port "
            "and give the same port to every machine"
        )
    port = free_port()
    note = (
        f"main_process_port {plan.main_port} ({source}) is in use; using free port {port} instead"
    )
    return dataclasses.replace(plan, main_port=port, port_note=note)
