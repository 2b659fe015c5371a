"""What checkpoint code reads of the run it saves or restores, typed.

``CheckpointHost`` is the registry of prepared objects (``overdrive.training.prepared.Prepared``, in
the order they were prepared: what a checkpoint's parts are numbered by) and the rest:
the strategy, the process state, precision, the accumulation window and the few services
checkpoint code calls. The Accelerator is one; checkpoint code reads nothing else of it.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from overdrive.checkpoint.records import StateDict

if TYPE_CHECKING:
    from overdrive.arguments.plugins import ProjectConfiguration
    from overdrive.precision import Precision
    from overdrive.training.accumulation import GradientState
    from overdrive.training.prepared import Prepared


class CheckpointedStrategy(Protocol):
    """What checkpoint code reads of the strategy (``overdrive.strategies.base.Strategy``
    is one): its state dicts and what it says of the checkpoints it writes and reads."""

    @property
    def name(self) -> str: ...

    @property
    def state_whole_on_every_process(self) -> bool: ...

    @property
    def checkpoints_mid_window(self) -> bool: ...

    @property
    def optimizer_state_by_name(self) -> bool | None: ...

    @property
    def optimizer_holds_a_part(self) -> bool: ...

    @property
    def sharded_checkpoints(self) -> bool: ...

    @property
    def loads_in_slices(self) -> bool: ...

    def state_dict(
        self, obj: nn.Module | torch.optim.Optimizer, *, sharded: bool = False
    ) -> StateDict: ...

    def load_state_dict(
        self,
        obj: nn.Module | torch.optim.Optimizer,
        state: StateDict,
        *,
        sharded: bool = False,
        strict: bool = True,
    ) -> object: ...

    def checkpoint_names(self) -> dict[int, str]: ...


class RunState(Protocol):
    """What checkpoint code reads of the process state (the Accelerator's ``PartialState``)."""

    @property
    def process_index(self) -> int: ...

    @property
    def num_processes(self) -> int: ...

    @property
    def is_main_process(self) -> bool: ...

    @property
    def timeout(self) -> timedelta | None: ...

    def wait_for_everyone(self) -> None: ...


class CheckpointHost(Protocol):
    """What ``save_state`` / ``load_state`` and the model-file helpers need of the run."""

    precision: Precision
    project_configuration: ProjectConfiguration
    gradient_state: GradientState
    pending_save: Future[Path] | None  # an asynchronous save still being written
    # The exact_resume setting: load_state continues prepared loaders mid-epoch and restores
    # an open window's gradients (off: Hugging Face Accelerate's load_state, which does not).
    exact_resume: bool

    @property
    def strategy(self) -> CheckpointedStrategy: ...

    @property
    def state(self) -> RunState: ...

    @property
    def prepared(self) -> Prepared: ...

    @property
    def sync_gradients(self) -> bool: ...

    @property
    def is_main_process(self) -> bool: ...

    def unwrap_model(
        self,
        model: nn.Module,
        keep_fp32_wrapper: bool = True,
        keep_torch_compile: bool | None = None,
    ) -> nn.Module: ...

    def scheduler_advances_per_process(self) -> bool: ...
