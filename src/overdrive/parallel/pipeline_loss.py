"""The last pipeline stage's loss, delivered to the other stages behind the schedule.

The loss of a batch is known on the last stage only, and the prepared model's call returns
it on every process. A collective after the schedule would hold the last stage back until
the first stage finishes its last backward. Instead each other stage posts its receive
before the schedule runs and the last stage sends as soon as the schedule returns, without
waiting; the first stage, which finishes last, finds the value already there. The messages
use a process group of their own, so they never pair with the schedule's own messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup, Work


class LossChannel:
    """Point-to-point delivery of one scalar from the last stage to every other stage."""

    def __init__(
        self, group: ProcessGroup | None, stage_ranks: list[int], device: torch.device
    ) -> None:
        self.group = group
        self.last = stage_ranks[-1]
        self.others = stage_ranks[:-1]
        self.device = device
        self._receive: tuple[Work | None, torch.Tensor] | None = None
        self._sends: list[Work | None] = []
        self._sent: torch.Tensor | None = None  # kept alive until its sends finish

    def expect(self) -> None:
        """Before the schedule, on a stage other than the last: post the receive."""
        import torch.distributed as dist

        buffer = torch.zeros((), dtype=torch.float32, device=self.device)
        self._receive = (dist.irecv(buffer, src=self.last, group=self.group), buffer)

    def receive(self) -> torch.Tensor:
        """After the schedule, on a stage other than the last: the loss it sent."""
        if self._receive is None:
            raise RuntimeError("LossChannel.receive() without expect()")
        work, buffer = self._receive
        self._receive = None
        _wait(work)
        return buffer

    def send(self, loss: torch.Tensor) -> None:
        """After the schedule, on the last stage: send ``loss`` to every other stage."""
        import torch.distributed as dist

        self.finish()
        self._sent = loss.detach().float().clone()
        self._sends = [dist.isend(self._sent, dst=r, group=self.group) for r in self.others]

    def finish(self) -> None:
        """Wait for the sends still in flight (before the next ones, and at teardown)."""
        for work in self._sends:
            _wait(work)
        self._sends = []
        self._sent = None


def _wait(work: Work | None) -> None:
    """Wait for one message. torch answers None instead of a handle only to a process outside
    the group, which a stage never is."""
    if work is None:
        raise RuntimeError("a pipeline stage is outside its loss channel's process group")
    work.wait()
