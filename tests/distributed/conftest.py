"""Fixtures shared by the distributed tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cpu_adam_built() -> None:
    """DeepSpeed's CPU Adam, compiled before the first launch that offloads (see
    tests/helpers/deepspeed.py)."""
    from tests.helpers.deepspeed import build_cpu_adam

    build_cpu_adam()
