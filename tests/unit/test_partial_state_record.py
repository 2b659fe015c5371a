"""``PartialState._shared_state``: whether a state was configured in this process, as the
Hugging Face Accelerate's callers (transformers' ``use_configured_state``, its tracker tests) ask."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from overdrive.accelerator import Accelerator
from overdrive.state import AcceleratorState, PartialState
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> Iterator[None]:
    forget_launcher(monkeypatch, tmp_path)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_empty_until_a_state_is_made_and_again_after_a_reset() -> None:
    assert PartialState._shared_state == {}
    state = PartialState(cpu=True)
    record = PartialState._shared_state
    assert record["_cpu"] is True
    assert record["device"] == state.device == torch.device("cpu")
    assert (record["num_processes"], record["process_index"]) == (1, 0)
    PartialState._reset_state()
    assert PartialState._shared_state == {}
    Accelerator()
    assert PartialState._shared_state["_cpu"] is False
    AcceleratorState._reset_state(reset_partial_state=True)
    assert PartialState._shared_state == {}


TRAINER_SCRIPT = """
import sys, torch
from transformers import TrainingArguments
from accelerate import Accelerator
config = {"use_configured_state": True}
try:
    TrainingArguments(output_dir=sys.argv[1], accelerator_config=config, use_cpu=True)
except ValueError as error:
    assert "pre-configured" in str(error), error
else:
    raise AssertionError("use_configured_state started without a configured state")
Accelerator(cpu=True)
args = TrainingArguments(output_dir=sys.argv[1], accelerator_config=config, use_cpu=True)
assert args.distributed_state.device == torch.device("cpu")
print("CONFIGURED-STATE-OK")
"""


def test_trainer_use_configured_state_needs_a_state_made_first(tmp_path: Path) -> None:
    """transformers' ``accelerator_config={"use_configured_state": True}`` refuses to start
    before an Accelerator or PartialState exists, and uses the one made first after (a fresh
    process: transformers decides at import whether ``accelerate`` is there)."""
    pytest.importorskip("transformers")
    script = tmp_path / "configured_state.py"
    script.write_text(TRAINER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", str(script), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CONFIGURED-STATE-OK" in done.stdout
