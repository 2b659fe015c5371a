"""Placeholders for an optimizer and a scheduler that a DeepSpeed JSON defines.

When the DeepSpeed config has an ``optimizer`` (or ``scheduler``) section, DeepSpeed builds
that object itself; the script passes these stand-ins to ``accelerator.prepare`` in its place,
so the loop stays the same. Their arguments fill the section's ``"auto"`` values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only for the annotations: the CLI imports this module
    import torch
    from torch.optim.optimizer import ParamsT


class DummyOptim:
    """Stands for the optimizer of the DeepSpeed JSON's ``optimizer`` section.

    ``params`` are the model's parameters (or parameter groups); ``lr`` and ``weight_decay``
    (and any keyword, e.g. ``betas``, ``eps``) fill the section's ``"auto"`` values.
    """

    # Only DeepSpeed builds the real object; every other backend refuses it at prepare.
    stands_in_for = ("DEEPSPEED", "an optimizer defined in a DeepSpeed config")

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, weight_decay: float = 0.0, **kwargs: object
    ) -> None:
        self.params = list(params)
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs

    def hyperparameters(self) -> dict[str, object]:
        """Values for ``"auto"`` entries of the optimizer section's ``params``."""
        return {"lr": self.lr, "weight_decay": self.weight_decay, **self.kwargs}


class SchedulerArguments:
    """The arguments of a scheduler an engine builds itself (DeepSpeed's, Megatron-LM's)."""

    def __init__(
        self,
        optimizer: object,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        **kwargs: object,
    ) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.kwargs = kwargs


class DummyScheduler(SchedulerArguments):
    """Stands for the scheduler of the DeepSpeed JSON's ``scheduler`` section.

    ``total_num_steps`` and ``warmup_num_steps`` (and any keyword) fill the section's
    ``"auto"`` values; ``warmup_max_lr`` defaults to the optimizer's learning rate.
    """

    stands_in_for = ("DEEPSPEED", "a scheduler defined in a DeepSpeed config")

    def __init__(
        self,
        optimizer: object,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        lr_scheduler_callable: Callable[[torch.optim.Optimizer], object] | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(optimizer, total_num_steps, warmup_num_steps, **kwargs)
        # Builds the scheduler from the optimizer DeepSpeed steps, for a DeepSpeed JSON with
        # an optimizer but no scheduler section (transformers' Trainer passes one).
        self.lr_scheduler_callable = lr_scheduler_callable

    def hyperparameters(self) -> dict[str, object]:
        """Values for ``"auto"`` entries of the scheduler section's ``params``."""
        values: dict[str, object] = {"warmup_num_steps": self.warmup_num_steps, "warmup_min_lr": 0}
        if self.total_num_steps is not None:
            values["total_num_steps"] = self.total_num_steps
        lr = getattr(self.optimizer, "lr", None)
        if lr is not None:
            values["warmup_max_lr"] = lr
        return {**values, **self.kwargs}
