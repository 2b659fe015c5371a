"""Fixtures shared by the distributed tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def cpu_adam_built() -> None:
    """DeepSpeed's CPU Adam, compiled before the first launch that offloads (see
    tests/helpers/deepspeed.py)."""
    from tests.helpers.deepspeed import build_cpu_adam

    build_cpu_adam()


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """transformers' Trainer (scripts/trainer_case.py) uninterrupted on 2 DDP processes, 2
    samples each, 10 steps: launched once for every test that compares with that run."""
    from tests.distributed.test_trainer_backends import train

    return train(tmp_path_factory.mktemp("trainer-ddp"), "whole", {"batch": 2}, nprocs=2)
