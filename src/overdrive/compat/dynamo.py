"""``TorchDynamoPlugin``: Hugging Face Accelerate's torch.compile settings object."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

_ON = ("1", "true", "yes", "on")


@dataclass
class TorchDynamoPlugin:
    """torch.compile settings (``backend``, ``mode``, ``fullgraph``, ``dynamic``, ``options``).

    Fields left unset read Hugging Face Accelerate's ``ACCELERATE_DYNAMO_*`` variables."""

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

    def __post_init__(self) -> None:
        env = os.environ
        if self.backend is None and env.get("ACCELERATE_DYNAMO_BACKEND"):
            self.backend = env["ACCELERATE_DYNAMO_BACKEND"].lower()
        if self.mode is None and env.get("ACCELERATE_DYNAMO_MODE"):
            self.mode = env["ACCELERATE_DYNAMO_MODE"]
        for name, variable in (("fullgraph", "FULLGRAPH"), ("dynamic", "DYNAMIC")):
            value = env.get(f"ACCELERATE_DYNAMO_USE_{variable}")
            if getattr(self, name) is None and value is not None:
                setattr(self, name, value.strip().lower() in _ON)

    def to_kwargs(self) -> dict[str, Any]:
        """The fields that differ from a plugin made with no arguments and no environment
        (whose fields hold their declared defaults: the environment fills only unset ones)."""
        changed = {}
        for f in fields(self):
            factory = f.default_factory
            default = factory() if callable(factory) else f.default
            if getattr(self, f.name) != default:
                changed[f.name] = getattr(self, f.name)
        return changed
