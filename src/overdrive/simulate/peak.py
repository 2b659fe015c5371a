"""Peak memory by kind (parameters, gradients, optimizer state, activations, temporaries), from
PyTorch's ``MemTracker``, split into the peak before the script's first forward (building and
preparing the model) and the peak during the training steps."""

from __future__ import annotations

from typing import Any

from torch.distributed._tools.mem_tracker import MemTracker
from torch.nn.modules.module import register_module_forward_pre_hook


def _by_kind(snapshots: dict[Any, dict[Any, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for per_device in snapshots.values():
        for name, value in per_device.items():
            key = str(getattr(name, "value", name))
            out[key] = out.get(key, 0) + int(value)
    return out


class PeakTracker(MemTracker):
    """``MemTracker`` keeping only the process-wide peak: its per-module peaks walk every
    module on every operator, which for a 32-layer model costs more than the run itself."""

    def __init__(self) -> None:
        super().__init__()
        self.setup_peak: dict[str, int] = {}
        self._first_forward = register_module_forward_pre_hook(self._on_first_forward)

    def _update_peak_stats(self, peak_state: Any) -> None:
        for device, snapshot in self._curr_mem_snap.items():
            if self._peak_mem.get(device, 0) < snapshot["Total"]:
                self._peak_mem[device] = snapshot["Total"]
                self._peak_mem_snap[device] = dict(snapshot)

    def _on_first_forward(self, module: Any, args: Any) -> None:
        self._first_forward.remove()
        self.setup_peak = _by_kind(self._peak_mem_snap)
        self._peak_mem, self._peak_mem_snap = {}, {}

    def step_peak(self) -> dict[str, int]:
        """The peak since the first forward, by kind (with its "Total")."""
        return _by_kind(self._peak_mem_snap)

    def close(self) -> None:
        self._first_forward.remove()
