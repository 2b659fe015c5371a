"""``TorchDynamoPlugin``: the described system's torch.compile settings object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TorchDynamoPlugin:
    """torch.compile settings (``backend``, ``mode``, ``fullgraph``, ``dynamic``, ``options``)."""

    backend: str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: dict[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The torch.compile keyword arguments (unset ones left out)."""
        keys = ("backend", "mode", "fullgraph", "dynamic", "options", "disable")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
