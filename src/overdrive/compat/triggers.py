"""``set_trigger`` / ``check_trigger``: one process raises a flag, every process sees it."""

from __future__ import annotations

import torch

from overdrive.processes import ops


class TriggerMixin:
    """A flag any process can set and all processes read together (e.g. to stop early)."""

    _trigger: bool = False

    def set_trigger(self) -> None:
        """Raise the flag on this process; the next ``check_trigger()`` sees it everywhere."""
        self._trigger = True

    def check_trigger(self) -> bool:
        """Collective: True on every process when any process set the flag since the last
        check (the flag is then cleared). Call it on every process."""
        flag = torch.tensor([1 if self._trigger else 0], device=ops.comm_device())
        total = ops.reduce(flag, "sum", debug=False)
        if int(total.item()) > 0:
            self._trigger = False
            return True
        return False
