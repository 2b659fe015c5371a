"""This run's layout and its device mesh, made once per strategy: the one place that answers
which data-parallel rank and group a process is in, whatever the backend.

The layout (``parallel/layout.py``) is plain numbers checked from the settings; the mesh is
built from it the first time a backend needs one (it needs the process group), with one
``DeviceMesh`` dimension per layout dimension above 1, and its sub-groups are cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.mesh import build_mesh

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

_DP = ("dp_replicate", "dp_shard")


class Topology:
    """``layout`` on devices of ``device_type``, with its mesh and groups built on demand."""

    def __init__(self, layout: ParallelLayout, device_type: str) -> None:
        self.layout = layout
        self.device_type = device_type
        self._mesh: DeviceMesh | None = None
        self._dp_group: ProcessGroup | None = None

    @property
    def mesh(self) -> DeviceMesh:
        """The device mesh of every dimension above 1 (and ``dp_shard``); built once."""
        if self._mesh is None:
            self._mesh = build_mesh(self.layout, self.device_type)
        return self._mesh

    def dp_coordinates(self, rank: int) -> tuple[int, int]:
        """(data-parallel rank, data-parallel size) of process ``rank``."""
        return self.layout.dp_rank(rank), self.layout.dp_size

    def data_ranks(self) -> list[int] | None:
        """One process per data-parallel rank, in that order; None when every process reads
        its own data (the data-parallel ranks are the process ranks)."""
        if self.layout.dp_size == self.layout.world_size:
            return None
        return self.layout.data_ranks()

    def dp_group(self) -> ProcessGroup | None:
        """The process group of this process's data-parallel peers (the same coordinate on
        every other dimension), over which results are reduced; None when that is every
        process. With context parallelism the ``cp`` processes are peers too: each holds the
        results of another part of the sequences (Hugging Face Accelerate's ``dp_cp``)."""
        layout = self.layout
        if layout.dp_size * layout.cp == layout.world_size:
            return None
        if self._dp_group is None:
            dims = [n for n in (*_DP, "cp") if getattr(layout, n) > 1] or ["dp_shard"]
            mesh = self.mesh
            if len(dims) == 1:
                self._dp_group = mesh[dims[0]].get_group()
            else:  # replicas, shards (HSDP) and cp together, as one dimension
                name = "dp_cp" if "cp" in dims else "dp"
                self._dp_group = mesh[tuple(dims)]._flatten(name).get_group()
        return self._dp_group
