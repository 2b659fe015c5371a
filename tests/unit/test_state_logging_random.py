"""get_logger logs on the main process only; set_seed and RNG capture round-trip."""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest
import torch

from overdrive.logging import get_logger
from overdrive.processes.random_state import capture_rng_state, restore_rng_state, set_seed


def test_logger_is_quiet_off_the_main_process(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger = get_logger("overdrive.test", log_level="INFO")
    with caplog.at_level(logging.INFO, logger="overdrive.test"):
        logger.info("main says %s", "hi")
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "2")
        logger.info("hidden")
        logger.info("shown", main_process_only=False)
    assert [r.getMessage() for r in caplog.records] == ["main says hi", "shown"]


def test_set_seed_and_rng_round_trip() -> None:
    set_seed(11)
    first = (random.random(), float(np.random.rand()), torch.rand(1).item())
    set_seed(11)
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == first
    saved = json.loads(json.dumps(capture_rng_state()))
    ahead = (random.random(), float(np.random.rand()), torch.rand(1).item())
    restore_rng_state(saved)
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == ahead
    assert set_seed(5, device_specific=True) == 5  # rank 0
