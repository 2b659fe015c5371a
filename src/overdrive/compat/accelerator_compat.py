"""Everything Hugging Face Accelerate's ``Accelerator`` has that overdrive's facade keeps out of
its own file: one base class made of small mixins by theme."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from overdrive.arguments.kwargs_handlers import SchedulerKwargs
from overdrive.compat.checkpoint_args import CheckpointArgsMixin
from overdrive.compat.hooks import HooksMixin
from overdrive.compat.process_control import ProcessControlMixin
from overdrive.compat.properties import PropertiesMixin
from overdrive.compat.triggers import TriggerMixin
from overdrive.errors import ConfigError
from overdrive.parallel.context_parallel import context_parallel_block, say_not_enabled
from overdrive.processes.process_state import RESET_MESSAGE, set_current
from overdrive.quantize.placement import check_quantized_placement
from overdrive.setup.notes import note, output_folder
from overdrive.tracking import check_logging_dir
from overdrive.training.prepared import PreparedRegistry


class AcceleratorCompat(
    ProcessControlMixin,
    TriggerMixin,
    HooksMixin,
    PropertiesMixin,
    CheckpointArgsMixin,
    PreparedRegistry,
):
    """Base of ``Accelerator``: Hugging Face Accelerate's methods and properties."""

    _state_was_reset = False
    step = 0  # Hugging Face Accelerate's micro-batch counter; overdrive keeps none

    def _compat_init(self) -> None:
        """Called at the end of ``Accelerator.__init__``."""
        set_current(self)
        self.gradient_state._loop = self.loop_state  # type: ignore[attr-defined]
        if getattr(self, "log_with", None):
            check_logging_dir(self)  # as Hugging Face Accelerate: here, not at init_trackers

    def _scheduler_per_process(self) -> bool:
        """Whether a prepared scheduler advances once per process per optimizer step (the
        Hugging Face Accelerate's count without split_batches)."""
        handlers: dict[type, Any] = self.kwargs_handlers
        handler = handlers.get(SchedulerKwargs) or SchedulerKwargs()
        return not (handler.once_per_optimizer_step or self.settings["split_batches"])

    def _scheduler_steps_per_advance(self) -> int:
        """Scheduler steps per optimizer step: Hugging Face Accelerate's count unless
        ``SchedulerKwargs(once_per_optimizer_step=True)``; a note at verbose."""
        world = int(self.state.num_processes)
        if not self._scheduler_per_process() or world == 1:
            return 1
        if self.state.is_main_process:  # a note: said with verbose, once per output folder
            note(
                self.settings,
                "scheduler_steps_per_process",
                f"a prepared LR scheduler advances {world} times per optimizer step (once per "
                "process, as Hugging Face Accelerate does without split_batches); pass "
                "kwargs_handlers=[SchedulerKwargs(once_per_optimizer_step=True)] to advance it "
                "once",
                output_folder(self),
            )
        return world

    def _check_quantized(
        self, model: Any, multi_backend: Callable[[], bool], on_xpu: Callable[[], bool]
    ) -> None:
        """Refuse an 8-bit or 4-bit model placed where it cannot train (Hugging Face
        Accelerate's check in ``prepare_model``; the bitsandbytes probes come from the
        ``accelerator`` module, where its tests patch them)."""
        state = self.state
        check_quantized_placement(model, state.device, state.use_distributed, multi_backend, on_xpu)

    def _check_not_reset(self) -> None:
        if self._state_was_reset:
            raise AttributeError(RESET_MESSAGE)

    @property
    def _debug(self) -> bool:
        return bool(self.state.debug)

    def maybe_context_parallel(
        self,
        buffers: list[Any] | None = None,
        buffer_seq_dims: list[int] | None = None,
        no_restore_buffers: set[Any] | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        """A block for one step of context-parallel training: ``buffers`` (the batch's
        tensors, e.g. input ids, position ids and shifted labels) keep this process's
        chunks of their ``buffer_seq_dims`` inside it, and attention runs as ring attention
        over the layout's ``cp`` processes; they are restored on leaving, except
        ``no_restore_buffers``. Without a context-parallel degree above 1 it does nothing
        (said once in the log), as in Hugging Face Accelerate."""
        topology = getattr(self.strategy, "topology", None)
        cp = topology.layout.cp if topology is not None else 1

        if topology is None or cp <= 1:
            say_not_enabled()
            return contextlib.nullcontext()
        return context_parallel_block(
            cp,
            lambda: topology.mesh["cp"],
            self.settings,
            list(self._models),
            buffers,
            buffer_seq_dims,
            no_restore_buffers,
        )

    def lomo_backward(self, loss: Any, learning_rate: float) -> None:
        raise ConfigError(
            "lomo_backward() (the LOMO optimizer's fused backward) is not supported by overdrive",
            key="lomo_backward",
            fix="use accelerator.backward(loss) with a regular optimizer",
        )

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
