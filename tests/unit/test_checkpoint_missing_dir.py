"""``load_state`` from a folder that does not exist (issue 41): the message lists the complete
checkpoints that do exist in the project folder and names the newest."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from overdrive import ProjectConfiguration
from overdrive.accelerator import Accelerator
from overdrive.checkpoint import CheckpointError
from tests.helpers.env import forget_launcher


def test_a_missing_folder_lists_the_checkpoints_that_exist_and_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forget_launcher(monkeypatch, tmp_path / "cache")
    project = tmp_path / "run"
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    assert model is not None
    first, second = accelerator.save_state(), accelerator.save_state()
    (project / "checkpoints" / "unfinished").mkdir()  # no completion marker: not listed
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as caught:
        accelerator.load_state("run/checkpoints/checkpoint_7")
    lines = str(caught.value).splitlines()
    assert lines[0] == "load_state: run/checkpoints/checkpoint_7 does not exist"
    assert lines[1] == (
        f"  fix: load_state({str(second)!r}) loads the newest; the complete checkpoints "
        f"there are {first}, {second}"
    )
