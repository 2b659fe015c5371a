"""What checkpoint code reads of the run it saves or restores, typed.

``CheckpointHost`` is the registry of prepared objects (``overdrive.prepared.Prepared``, in
the order they were prepared: what a checkpoint's parts are numbered by) and the rest:
the strategy, the process state, precision, the accumulation window and the few services
checkpoint code calls. The Accelerator is one; checkpoint code reads nothing else of it.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from torch import nn

if TYPE_CHECKING:
    from overdrive.accumulation import GradientState
    from overdrive.plugins import ProjectConfiguration
    from overdrive.precision import Precision
    from overdrive.prepared import Prepared
    from overdrive.strategies.base import Strategy


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

    strategy: Strategy
    precision: Precision
    project_configuration: ProjectConfiguration
    gradient_state: GradientState
    pending_save: Future[Path] | None  # an asynchronous save still being written
    # The exact_resume setting: load_state continues prepared loaders mid-epoch and restores
    # an open window's gradients (off: Hugging Face Accelerate's load_state, which does not).
    exact_resume: bool

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
