"""How a prepared optimizer's step, ``zero_grad`` and rescale run: the small protocol
``AcceleratedOptimizer`` depends on, and its plain-PyTorch form (every Strategy extends it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from overdrive.precision import Precision


class OptimizerSteps(Protocol):
    """What an ``AcceleratedOptimizer`` asks of the backend at the end of a window."""

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, precision: Precision, closure: Any = None
    ) -> bool: ...

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None: ...

    def rescale_grads(self, optimizer: torch.optim.Optimizer, factor: float) -> None: ...


class PlainSteps:
    """The steps as plain PyTorch runs them: through the precision policy, on local grads."""

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, precision: Precision, closure: Any = None
    ) -> bool:
        """One optimizer step when a window closes; returns whether it really ran."""
        if closure is None:
            return precision.optimizer_step(optimizer)
        return precision.optimizer_step(optimizer, closure=closure)

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        """Clear the gradients ``optimizer`` steps (after a window closed)."""
        optimizer.zero_grad(set_to_none=set_to_none)

    def rescale_grads(self, optimizer: torch.optim.Optimizer, factor: float) -> None:
        """Multiply the summed gradients by ``factor`` (a window closed early: k/m)."""
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)
