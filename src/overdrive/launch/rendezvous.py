"""Rendezvous choices that let torch's elastic agent restart a worker group cleanly.

In torch's default setup the workers share the agent's TCP store across restarts, so a
restarted group reads the previous attempt's addresses and cannot connect (pytorch issue
#135712). With restarts enabled we keep torch's own rendezvous but give every round a fresh
worker store: for c10d through torch's switch TORCH_DISABLE_SHARE_RDZV_TCP_STORE, for static
through a thin subclass of torch's static handler that opens a new agent-owned store.
"""

from __future__ import annotations

from typing import Any

RESTARTABLE_STATIC = "overdrive-static"
UNSHARED_STORE_VARIABLE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def _make_handler(params: Any) -> Any:
    from torch.distributed import PrefixStore, TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import (
        StaticTCPRendezvous,
        create_rdzv_handler,
    )

    class RestartableStatic(StaticTCPRendezvous):
        """torch's static rendezvous; from the second round on, workers get a fresh store.

        The machine with rank 0 hosts each round's store on a free port and publishes the
        port under a round-specific key of the rendezvous store; the agents keep owning the
        worker store, as in torch's first round.
        """

        rounds = 0
        _round_server: Any = None

        def get_backend(self) -> str:
            return RESTARTABLE_STATIC

        def next_rendezvous(self) -> Any:
            info = super().next_rendezvous()
            self.rounds += 1
            if self.rounds == 1:
                return info
            keys = PrefixStore(f"overdrive/round_{self.rounds}", info.store)
            if self.rank == 0:
                # Replacing the previous round's server closes it.
                self._round_server = TCPStore(
                    self.master_addr, 0, None, True, self.timeout, wait_for_workers=False
                )
                keys.set("port", str(self._round_server.port))
            port = int(keys.get("port").decode())
            store_info = RendezvousStoreInfo(self.master_addr, port)
            return RendezvousInfo(info.store, info.rank, info.world_size, store_info)

    handler = create_rdzv_handler(params)  # torch parses the parameters
    handler.__class__ = RestartableStatic
    return handler


def rdzv_backend_name(backend: str, max_restarts: int) -> str:
    """The elastic backend name to use; registers overdrive's static variant when needed."""
    if backend != "static" or max_restarts == 0:
        return backend
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    # Registering the same creator again (a second launch in this process) is allowed.
    rendezvous_handler_registry.register(RESTARTABLE_STATIC, _make_handler)
    return RESTARTABLE_STATIC


def restart_environment(backend: str, max_restarts: int) -> dict[str, str]:
    """Variables the agent must see so c10d restarts use a fresh worker store."""
    if backend == "c10d" and max_restarts > 0:
        return {UNSHARED_STORE_VARIABLE: "1"}
    return {}
