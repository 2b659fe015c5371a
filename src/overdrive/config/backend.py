"""The backend the settings ask for, as a ``DistributedType`` member (None: automatic).

The one place that turns the ``distributed_type`` setting's text into the enum; every other
module compares members, never backend names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from overdrive.config.types import DistributedType


def requested_backend(settings: Mapping[str, Any]) -> DistributedType | None:
    """``distributed_type`` as a member; None when it is unset (chosen from the world)."""
    value = settings["distributed_type"]
    return None if value is None else DistributedType(value)
