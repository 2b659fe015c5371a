"""One process on one device: no wrapping, no communication."""

from __future__ import annotations

from overdrive.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    """Plain PyTorch: the model moves to the device and is otherwise untouched."""

    name = "single"
    state_whole_on_every_process = True
