"""What checkpoint code reads of the run it saves or restores, typed.

``CheckpointHost`` is the registry of prepared objects (``overdrive.prepared.Prepared``, in
the order they were prepared: what a checkpoint's parts are numbered by) and the rest:
the strategy, the process state, precision, the accumulation window and the few services
checkpoint code calls. The Accelerator is one; checkpoint code reads nothing else of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from torch import nn

if TYPE_CHECKING:
    from overdrive.accumulation import GradientState
    from overdrive.plugins import ProjectConfiguration
    from overdrive.precision import Precision
    from overdrive.prepared import Prepared
    from overdrive.strategies.base import Strategy


class CheckpointHost(Protocol):
    """What ``save_state`` / ``load_state`` and the model-file helpers need of the run."""

    strategy: Strategy
    state: Any
    precision: Precision
    project_configuration: ProjectConfiguration
    gradient_state: GradientState
    pending_save: Future[Any] | None

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

    def prepare(self, *objects: Any, device_placement: Sequence[bool] | None = None) -> Any: ...

    def scheduler_advances_per_process(self) -> bool: ...
