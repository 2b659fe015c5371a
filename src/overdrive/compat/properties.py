"""Read-only facts and settings Hugging Face Accelerate's Accelerator exposes as properties."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from overdrive.arguments.parallel_handlers import TorchContextParallelConfig
from overdrive.arguments.plugins import ParallelismConfig
from overdrive.compat.process_control import _set_even
from overdrive.config.provenance import Resolved, Source
from overdrive.config.settings import Settings
from overdrive.parallel.cp_rules import CP_COMM_KEY


class PropertiesMixin:
    """Data-loading settings, backend facts and parallel ranks, read from the settings."""

    settings: Any
    state: Any
    strategy: Any
    project_configuration: Any
    _dataloaders: list[Any]
    gradient_state: Any
    dataloader_config: Any

    # --- accumulation ---------------------------------------------------------------------
    @property
    def sync_gradients(self) -> bool:
        """True on a micro-batch that closes an accumulation window (the optimizer steps)."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, sync: bool) -> None:
        """Force (or stop) gradient synchronisation, as Hugging Face Accelerate's setter does."""
        self.gradient_state.sync_gradients = bool(sync)

    # --- data loading ---------------------------------------------------------------------
    @property
    def even_batches(self) -> bool:
        return bool(self.settings["even_batches"])

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        """Change the setting for loaders prepared from now on and those prepared so far."""
        resolved = {key: self.settings.resolved(key) for key in self.settings}
        source = Source(kind="code", detail="accelerator.even_batches = ...")
        resolved["even_batches"] = Resolved(bool(value), source)
        self.settings = Settings(resolved)
        for dl in self._dataloaders:
            _set_even(dl, bool(value))

    @property
    def dispatch_batches(self) -> bool | None:
        return self.settings["dispatch_batches"]

    @property
    def use_seedable_sampler(self) -> bool:
        return bool(self.settings["use_seedable_sampler"])

    @property
    def non_blocking(self) -> bool:
        return bool(self.settings["non_blocking"])

    @property
    def use_stateful_dataloader(self) -> bool:
        """Whether prepared loaders read through torchdata's ``StatefulDataLoader`` (they are
        resumable either way: ``state_dict``/``load_state_dict``)."""
        return bool(self.dataloader_config.use_stateful_dataloader)

    # --- backend facts ------------------------------------------------------------------
    @property
    def is_fsdp2(self) -> bool:
        return bool(self.state.decision.chain.fsdp2)

    @property
    def fp8_backend(self) -> str | None:
        return "AO" if self.settings["mixed_precision"] == "fp8" else None

    @property
    def should_save_model(self) -> bool:
        return True

    @property
    def save_iteration(self) -> int:
        """The number the next automatically named checkpoint gets."""
        return int(self.project_configuration.iteration)

    # --- the parallel layout ------------------------------------------------------------
    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return self.torch_device_mesh is not None

    @property
    def torch_device_mesh(self) -> Any:
        return getattr(self.strategy, "mesh", None)

    @cached_property
    def parallelism_config(self) -> ParallelismConfig | None:
        """The decision's layout as a ``ParallelismConfig`` (every size, cp and pp included),
        built on the first read and kept: the layout is fixed for the Accelerator's life."""
        layout = self.state.decision.layout
        unset = all(self.settings[key] is None for key in ParallelismConfig.KEYS.values())
        if unset and layout.tp == layout.pp == layout.cp == 1:
            return None  # nothing asked for a parallel layout (Trainer reads None as "plain")
        cp_handler = None
        if layout.cp > 1:  # the settings' comm strategy, else the handler's default
            cp_handler = TorchContextParallelConfig(cp_comm_strategy=self.settings[CP_COMM_KEY])
        return ParallelismConfig(
            dp_replicate_size=layout.dp_replicate,
            dp_shard_size=layout.dp_shard,
            tp_size=layout.tp,
            cp_size=layout.cp,
            cp_handler=cp_handler,
            pp_size=layout.pp,
            sequence_parallel=bool(
                getattr(getattr(self.strategy, "tp", None), "sequence_parallel", False)
            ),
        )

    def _mesh_rank(self, names: tuple[str, ...], default: int) -> int:
        mesh = self.torch_device_mesh
        dims = getattr(mesh, "mesh_dim_names", None) or ()
        for name in names:
            if name in dims:
                return int(mesh[name].get_local_rank())
        return default

    @property
    def data_parallel_rank(self) -> int:
        """This process's index among the data-parallel replicas (all processes with DDP;
        the processes of one tensor-parallel group share it)."""
        rank, _ = self.strategy.data_parallel_coordinates(
            self.state.process_index, self.state.num_processes
        )
        return self._mesh_rank(("dp_replicate", "dp"), rank)

    @property
    def data_parallel_shard_rank(self) -> int:
        return self._mesh_rank(("dp_shard",), 0)

    @property
    def tensor_parallel_rank(self) -> int:
        return self._mesh_rank(("tp",), 0)

    @property
    def pipeline_parallel_rank(self) -> int:
        return self._mesh_rank(("pp",), 0)

    @property
    def context_parallel_rank(self) -> int:
        """This process's index among those that split one sequence (0 without them)."""
        return self._mesh_rank(("cp",), 0)
